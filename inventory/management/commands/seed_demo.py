from django.conf import settings
from django.core.management.base import BaseCommand

from inventory.demo import ensure_demo_fleet, ensure_demo_users


class Command(BaseCommand):
    help = "Load the demo fleet and the demo logins; what already exists is left alone."

    def handle(self, *args, **options):
        users = ensure_demo_users(settings.DEMO_PASSWORD)
        hosts = ensure_demo_fleet()
        self.stdout.write(
            f"demo users created: {', '.join(users) or 'none (all present)'}; "
            f"demo hosts created: {', '.join(hosts) or 'none (all present)'}"
        )
