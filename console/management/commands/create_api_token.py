from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from console.core.api_tokens.services import do_create_token


class Command(BaseCommand):
    help = "Make an API token for a user and print its key: the only time it is shown."

    def add_arguments(self, parser):
        parser.add_argument("username")

    def handle(self, *args, username, **options):
        try:
            user = get_user_model().objects.get_by_natural_key(username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user {username!r}") from None
        token, key = do_create_token(acting_user=None, user=user)
        self.stdout.write(key)
        self.stderr.write(f"token {token.fingerprint} for {username}; its key is not kept")
