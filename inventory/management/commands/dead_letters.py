from django.core.management.base import BaseCommand, CommandError

from inventory.models import DeadLetter
from inventory.services import AlreadyResolved, do_discard_dead_letter, do_replay_dead_letter


class Command(BaseCommand):
    help = (
        "List, replay or discard the messages ingest could not write. Replays and discards are "
        "audited as the system."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        listing = actions.add_parser("list", help="pending dead letters, newest first")
        listing.add_argument("--all", action="store_true", help="also replayed and discarded")
        for name, verb in (("replay", "run through ingest again"), ("discard", "set aside")):
            action = actions.add_parser(name, help=verb)
            action.add_argument("ids", nargs="*", type=int)
            action.add_argument("--all", action="store_true", help="every pending dead letter")
            if name == "discard":
                action.add_argument("--comment", default="")

    def handle(self, *args, action, **options):
        if action == "list":
            return self._list(options["all"])
        if bool(options["ids"]) == options["all"]:
            raise CommandError("name dead letter ids, or --all")
        pending = DeadLetter.objects.filter(status=DeadLetter.Status.PENDING)
        letters = list(
            pending if options["all"] else DeadLetter.objects.filter(pk__in=options["ids"])
        )
        missing = set(options["ids"]) - {letter.pk for letter in letters}
        if missing:
            raise CommandError(f"no dead letter {', '.join(map(str, sorted(missing)))}")
        failures = 0
        for letter in sorted(letters, key=lambda letter: letter.pk):
            try:
                if action == "replay":
                    failed = do_replay_dead_letter(letter, acting_user=None)
                    failures += failed is not None
                    outcome = f"failed again ({failed.code}): {failed}" if failed else "written"
                else:
                    do_discard_dead_letter(letter, acting_user=None, comment=options["comment"])
                    outcome = "discarded"
            except AlreadyResolved as error:
                outcome = str(error)
            self.stdout.write(f"{letter.pk}: {outcome}")
        if failures:
            raise CommandError(f"{failures} dead letter(s) failed again")

    def _list(self, everything: bool) -> None:
        letters = DeadLetter.objects.defer("body")
        if not everything:
            letters = letters.filter(status=DeadLetter.Status.PENDING)
        for letter in letters:
            self.stdout.write(
                f"{letter.pk}\t{letter.received_at:%Y-%m-%d %H:%M:%S}\t{letter.status}\t"
                f"{letter.host_name or '-'}\t{letter.reason_code}\t{letter.reason[:100]}"
            )
