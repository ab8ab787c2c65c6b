"""The change open now, and the ones the request being served opened: context variables and
no model, so that the logging configuration, set up before the apps are, can read them."""

from __future__ import annotations

import datetime as dt
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Change:
    id: uuid.UUID
    actor: Any  # the user acting, or None for the system
    # Set only when the demo replays history: the moment its rows say they happened.
    at: dt.datetime | None = None


OPEN_CHANGE: ContextVar[Change | None] = ContextVar("audit_change", default=None)
# The ids of the changes the request being served opened (None outside a request): the lines
# logged after its change closed, the request's own line among them, still name it.
_request_changes: ContextVar[list[uuid.UUID] | None] = ContextVar("request_changes", default=None)


def current_change() -> Change | None:
    return OPEN_CHANGE.get()


def start_request() -> None:
    """A request begins: no change of its own yet. Not reset when it ends, since Django logs the
    answer's line after the last middleware returned; the next request on the thread starts
    afresh."""
    _request_changes.set([])


def note_opened(change: Change) -> None:
    opened = _request_changes.get()
    if opened is not None:
        opened.append(change.id)


def change_id_for_logs() -> uuid.UUID | None:
    """The change open now, else the latest the request being served opened."""
    change = OPEN_CHANGE.get()
    if change is not None:
        return change.id
    opened = _request_changes.get()
    return opened[-1] if opened else None
