from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from console.core.private_files import write_private_file
from inventory.models import Host
from inventory.services import do_rotate_agent_secret


class Command(BaseCommand):
    help = (
        "Show, write to a file or rotate the secret a host's agent signs its batches with. "
        "Rotation is audited (with a fingerprint, never the secret)."
    )

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--rotate", action="store_true", help="issue a new secret first")
        parser.add_argument(
            "--output", type=Path, help="write it to this file (mode 0600) instead of printing"
        )

    def handle(self, *args, name, rotate, output, **options):
        host = Host.objects.filter(name=name).first()
        if host is None:
            raise CommandError(f"no host {name!r}: register it first")
        if rotate:
            host = do_rotate_agent_secret(host, acting_user=None)
        if output:
            write_private_file(output, host.agent_secret + "\n", replace=True)
            self.stdout.write(f"{name}: secret written to {output}")
        else:
            self.stdout.write(host.agent_secret)
