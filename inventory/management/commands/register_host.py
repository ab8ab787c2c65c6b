from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from console.core.auditing import Action
from console.core.auditing.changes import open_change, record_created
from console.core.private_files import write_private_file
from inventory.models import Host


class Command(BaseCommand):
    help = "Register a host for collection (its cards are discovered from its first batch)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--address", default="")
        parser.add_argument(
            "--collector", choices=Host.Collector.values, default=Host.Collector.NVML
        )
        parser.add_argument(
            "--secret-file",
            type=Path,
            help="write the host's agent secret to this file (mode 0600) for its agent's "
            "AGENT_SECRET_FILE; without it the secret is printed",
        )

    def handle(self, *args, name, address, collector, secret_file, **options):
        host = Host.objects.filter(name=name).first()
        if host is not None:
            self.stdout.write(f"{name} is already registered")
            self._hand_out(host, secret_file)
            return
        host = Host(name=name, address=address or name, collector=collector)
        try:
            host.full_clean()
        except ValidationError as error:
            raise CommandError(f"cannot register {name!r}: {error}") from None
        with open_change():
            host.save()
            record_created(host, Action.HOST_REGISTER, None, host=host,
                           comment="manage.py register_host")  # fmt: skip
        self.stdout.write(f"registered {name} ({host.get_collector_display()})")
        self._hand_out(host, secret_file)

    def _hand_out(self, host: Host, secret_file: Path | None) -> None:
        if secret_file:
            write_private_file(secret_file, host.agent_secret + "\n", replace=True)
            self.stdout.write(f"its agent secret is in {secret_file}")
        elif host.collector == Host.Collector.NVML:
            self.stdout.write(f"its agent secret (for AGENT_SECRET_FILE): {host.agent_secret}")
