"""Making and revoking API tokens: each one audited change, naming the token's user and its
fingerprint, never its key."""

from console.core.api_tokens.models import ApiToken, digest_of, new_key
from console.core.auditing import Action
from console.core.auditing.changes import atomic_change, record


def _picture(token: ApiToken) -> dict:
    return {
        "user": token.user.get_username(),
        "fingerprint": token.fingerprint,
        "created": token.created.isoformat(),
    }


@atomic_change
def do_create_token(*, acting_user, user) -> tuple[ApiToken, str]:
    """A new token for `user`, and its key, which nothing keeps: show it now, once."""
    key = new_key()
    token = ApiToken.objects.create(user=user, digest=digest_of(key))
    record(actor=acting_user, action=Action.TOKEN_CREATE, obj=user, before=None,
           after=_picture(token), comment="API token")  # fmt: skip
    return token, key


@atomic_change
def do_delete_token(*, acting_user, token: ApiToken) -> None:
    before = _picture(token)
    token.delete()
    record(actor=acting_user, action=Action.TOKEN_DELETE, obj=token.user, before=before,
           after=None, comment="API token")  # fmt: skip
