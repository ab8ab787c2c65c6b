from django.conf import settings
from django.core.management.base import BaseCommand

from console.core.auditing.changes import open_change
from inventory.demo import ensure_demo_fleet, ensure_demo_users, fleet_seeded
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

    def handle(self, *args, history_days, **options):
        with open_change():  # one change id for the whole seed
            users = ensure_demo_users(settings.DEMO_PASSWORD)
            hosts = ensure_demo_fleet()
        fleet_seeded.send(sender=Command, hosts=hosts)  # each answer opens changes of its own
        self.stdout.write(
            f"demo users created: {', '.join(users) or 'none (all present)'}; "
            f"demo hosts created: {', '.join(hosts) or 'none (all present)'}"
        )
        if hosts and history_days > 0:
            # The worker writes it while the console already serves: pages fill in as it goes.
            backfill_demo_history.delay(history_days)
            self.stdout.write(f"queued {history_days:g} days of simulated history")
