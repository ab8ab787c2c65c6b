"""One change per user action: one durable transaction, one change id on all its audit rows.

The `do_*` function a view or task calls opens the change; a `do_*` it calls in turn, or an
admin inline saved with its parent, joins the change already open instead of opening one of
its own, so everything one action writes commits together and shares the id.
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import models, transaction
from django.utils import timezone

from console.core.auditing.actions import Action
from console.core.auditing.context import OPEN_CHANGE, Change, current_change, note_opened
from console.core.auditing.diff import changed_fields, snapshot
from console.core.auditing.models import AuditEntry


@contextmanager
def open_change(
    actor=None, *, at: dt.datetime | None = None, durable: bool = True
) -> Iterator[Change]:
    """Open a change, or join the one already open (its transaction, id and actor).

    durable=False is for the one writer whose changes belong to its own transaction (ingest
    discovers a card in the transaction that writes the batch naming it, so a batch rolled
    back leaves no card behind); every user action opens a durable change.
    """
    joined = current_change()
    if joined is not None:
        yield joined
        return
    change = Change(id=uuid.uuid4(), actor=actor, at=at)
    note_opened(change)
    # durable: a top-level action must commit on its own, never inside a caller's transaction.
    with transaction.atomic(durable=durable):
        token = OPEN_CHANGE.set(change)
        try:
            yield change
        finally:
            # Closed before the commit, so on-commit work (gate checks) opens changes of its own.
            OPEN_CHANGE.reset(token)


def atomic_change(func):
    """Run a `do_*` function as one change, acted by its `acting_user` keyword."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with open_change(kwargs.get("acting_user")):
            return func(*args, **kwargs)

    return wrapper


def record(
    *,
    actor,
    action: Action | str,
    obj: models.Model,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    host=None,
    comment: str = "",
) -> AuditEntry:
    """One audit row in the open change; outside any, a change of its own."""
    change = current_change()
    return AuditEntry.objects.create(
        change_id=change.id if change else uuid.uuid4(),
        at=change.at if change and change.at else timezone.now(),
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=actor.get_username() if actor is not None else "system",
        action=Action(action),  # an action the enum does not list raises ValueError
        content_type=ContentType.objects.get_for_model(type(obj)),
        object_id=str(obj.pk),
        object_repr=str(obj)[:200],
        host=host,
        before=before,
        after=after,
        comment=comment,
    )


@dataclass
class AuditRow:
    """The row `audited` writes once its block is done; the block may still set its host and
    comment (a comment saying what the change turned out to do is known only after it)."""

    before: dict[str, Any]
    host: Any = None
    comment: str = ""


@contextmanager
def audited(
    obj: models.Model,
    action: Action | str,
    actor,
    *,
    host=None,
    comment: str = "",
    state: Callable[[Any], dict[str, Any]] = snapshot,
    only_if_changed: bool = False,
) -> Iterator[AuditRow]:
    """Record one audit row for what the block does to `obj`: its state captured before the
    block and after it.

    `state` pictures the object (snapshot, or a narrower picture of the model's own).
    only_if_changed writes no row when the two pictures differ in no field. A block that
    raises writes none either: the exception goes on, and with it the change's transaction.
    """
    row = AuditRow(before=state(obj), host=host, comment=comment)
    yield row
    after = state(obj)
    if only_if_changed and not changed_fields(row.before, after):
        return
    record(actor=actor, action=action, obj=obj, before=row.before, after=after,
           host=row.host, comment=row.comment)  # fmt: skip


def record_created(
    obj: models.Model, action: Action | str, actor, *, host=None, comment: str = ""
) -> AuditEntry:
    """The row of an object just created: nothing before it, its snapshot after."""
    return record(actor=actor, action=action, obj=obj, before=None, after=snapshot(obj),
                  host=host, comment=comment)  # fmt: skip
