from django.core.management.base import BaseCommand

from runbooks.services import do_sync_library


class Command(BaseCommand):
    help = (
        "Bring the default runbook library (runbooks/library/*.md) to this installation: "
        "install new notes, update the ones nobody edited here, and keep a newer default text "
        "beside each edited one for review. Audited as the system; safe to run again."
    )

    def handle(self, *args, **options):
        result = do_sync_library(acting_user=None)
        for label, slugs in (
            ("installed", result.installed),
            ("updated", result.updated),
            ("flagged (edited here; the new default text waits beside it)", result.flagged),
        ):
            for slug in slugs:
                self.stdout.write(f"{label}: {slug}")
        self.stdout.write(f"{len(result.unchanged)} unchanged")
