from django.core.management.base import BaseCommand

from console.alerts.models import AlertRule
from console.alerts.prometheus_rules import rule_file


class Command(BaseCommand):
    help = "Print the alert rules that map onto /metrics as a Prometheus rule file."

    def add_arguments(self, parser):
        parser.add_argument("--output", "-o", help="Write to this file instead of stdout.")

    def handle(self, *args, output=None, **options):
        text = rule_file(AlertRule.objects.order_by("slug"))
        if output:
            with open(output, "w") as out:
                out.write(text)
        else:
            self.stdout.write(text, ending="")
