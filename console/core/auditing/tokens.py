"""API tokens are audited when saved or deleted, whether made in the admin or by
`manage.py drf_create_token`: neither goes through a `do_*` function of ours.

The row names the token's user, never the token: its key is its primary key, and the trail
must not hold a working credential.
"""

from django.db.models.signals import post_delete, post_save
from rest_framework.authtoken.models import Token, TokenProxy

from console.core.auditing import Action
from console.core.auditing.changes import current_change, record


def _picture(token: Token) -> dict:
    return {"user": token.user.get_username(), "created": token.created.isoformat()}


def _record(token: Token, action: Action, before, after) -> None:
    change = current_change()
    record(
        actor=change.actor if change else None,
        action=action,
        obj=token.user,
        before=before,
        after=after,
        comment="API token",
    )


def token_saved(sender, instance, created, **kwargs) -> None:
    if created:
        _record(instance, Action.TOKEN_CREATE, None, _picture(instance))


def token_deleted(sender, instance, **kwargs) -> None:
    _record(instance, Action.TOKEN_DELETE, _picture(instance), None)


def connect() -> None:
    # The admin saves TokenProxy instances, the command Token ones; signals name the class.
    for model in (Token, TokenProxy):
        post_save.connect(token_saved, sender=model, dispatch_uid=f"audit-saved-{model.__name__}")
        post_delete.connect(
            token_deleted, sender=model, dispatch_uid=f"audit-deleted-{model.__name__}"
        )
