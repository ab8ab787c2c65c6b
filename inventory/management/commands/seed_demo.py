import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from console.core.auditing.changes import open_change
from console.core.private_files import write_private_file
from inventory.demo import demo_fleet_secrets, ensure_demo_fleet, ensure_demo_users, fleet_seeded
from inventory.tasks import backfill_demo_history


class Command(BaseCommand):
    help = "Load the demo fleet and the demo logins; what already exists is left alone."

    def add_arguments(self, parser):
        parser.add_argument(
            "--history-days",
            type=float,
            default=settings.DEMO_HISTORY_DAYS,
            help="days of simulated history to write in the background (0: none)",
        )
        parser.add_argument(
            "--secrets-file",
            type=Path,
            help="write the demo fleet's host secrets (a JSON object, mode 0600) here, for its "
            "simulator agent's AGENT_SECRET_FILE",
        )

    def handle(self, *args, history_days, secrets_file, **options):
        with open_change():  # one change id for the whole seed
            users = ensure_demo_users(settings.DEMO_PASSWORD)
            hosts = ensure_demo_fleet()
        fleet_seeded.send(sender=Command, hosts=hosts)  # each answer opens changes of its own
        if secrets_file:
            write_private_file(secrets_file, json.dumps(demo_fleet_secrets()), replace=True)
        self.stdout.write(
            f"demo users created: {', '.join(users) or 'none (all present)'}; "
            f"demo hosts created: {', '.join(hosts) or 'none (all present)'}"
        )
        if hosts and history_days > 0:
            # The worker writes it while the console already serves: pages fill in as it goes.
            backfill_demo_history.delay(history_days)
            self.stdout.write(f"queued {history_days:g} days of simulated history")
