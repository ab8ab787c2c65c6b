from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from console.audit import Action, snapshot
from console.audit.changes import open_change, record
from inventory.models import Host


class Command(BaseCommand):
    help = "Register a host for collection (its cards are discovered from its first batch)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--address", default="")
        parser.add_argument(
            "--collector", choices=Host.Collector.values, default=Host.Collector.NVML
        )

    def handle(self, *args, name, address, collector, **options):
        host = Host(name=name, address=address or name, collector=collector)
        if Host.objects.filter(name=name).exists():
            self.stdout.write(f"{name} is already registered")
            return
        try:
            host.full_clean()
        except ValidationError as error:
            raise CommandError(f"cannot register {name!r}: {error}") from None
        with open_change():
            host.save()
            record(actor=None, action=Action.HOST_REGISTER, obj=host, before=None,
                   after=snapshot(host), host=host, comment="manage.py register_host")  # fmt: skip
        self.stdout.write(f"registered {name} ({host.get_collector_display()})")
