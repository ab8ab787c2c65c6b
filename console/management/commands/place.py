import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from console.placement import PlacementInputError, solve


class Command(BaseCommand):
    help = "Place models on GPU cards: read a placement request (JSON), write the answer."

    def add_arguments(self, parser):
        parser.add_argument("input", help="request file (JSON), or - for standard input")
        parser.add_argument("--output", help="write the answer here instead of standard output")

    def handle(self, *args, input, output, **options):
        try:
            text = sys.stdin.read() if input == "-" else Path(input).read_text()
        except OSError as error:
            raise CommandError(f"cannot read {input}: {error.strerror}") from None
        try:
            request = json.loads(text)
        except json.JSONDecodeError as error:
            raise CommandError(f"{input} is not JSON: {error}") from None
        try:
            answer = solve(request)
        except PlacementInputError as invalid:
            raise CommandError(
                "invalid placement request:\n" + "\n".join(f"  {e}" for e in invalid.errors)
            ) from None
        text = json.dumps(answer, indent=2) + "\n"
        if output:
            Path(output).write_text(text)
        else:
            self.stdout.write(text, ending="")
