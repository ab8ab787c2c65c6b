from django.core.management.base import BaseCommand
from django.utils import timezone

from console.operations.demo import ensure_operations_demo


class Command(BaseCommand):
    help = (
        "Load the operations demo's host ops-a100, its standing policies and an approved "
        "off-peak reload (after seed_demo, which creates the demo approver); an existing "
        "host is left alone."
    )

    def handle(self, *args, **options):
        host = ensure_operations_demo(timezone.now())
        self.stdout.write(
            f"operations demo host created: {host.name}"
            if host
            else "operations demo host: present"
        )
