"""API tokens for tests, made as the admin or the command makes them."""

from console.core.api_tokens.services import do_create_token


def token_for(user) -> str:
    """The key of a new token of `user`'s."""
    return do_create_token(acting_user=user, user=user)[1]
