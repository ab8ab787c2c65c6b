"""The audit trail: who changed what, when, and what it looked like before and after.

Services call `record()` inside the same transaction as the change itself, so an audit row
exists exactly when the change does.
"""

import datetime
import decimal
import uuid
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import models

from console.models import AuditEntry


def snapshot(obj: models.Model) -> dict[str, Any]:
    """A JSON-safe picture of a model instance: concrete fields and many-to-many ids."""
    opts = obj._meta
    data: dict[str, Any] = {}
    for field in opts.concrete_fields:
        data[field.attname] = _json_safe(field.value_from_object(obj))
    if obj.pk is not None:
        for field in opts.many_to_many:
            data[field.name] = sorted(
                _json_safe(pk) for pk in getattr(obj, field.name).values_list("pk", flat=True)
            )
    return data


def _json_safe(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    return value


def record(
    *,
    actor,
    action: str,
    obj: models.Model,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    host=None,
    comment: str = "",
) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=actor.get_username() if actor is not None else "system",
        action=action,
        content_type=ContentType.objects.get_for_model(type(obj)),
        object_id=str(obj.pk),
        object_repr=str(obj)[:200],
        host=host,
        before=before,
        after=after,
        comment=comment,
    )


# Timestamps change on every save; listing them would hide what really changed.
_BOOKKEEPING = {"created_at", "updated_at"}


def changed_fields(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[str]:
    before, after = before or {}, after or {}
    keys = (before.keys() | after.keys()) - _BOOKKEEPING
    return sorted(key for key in keys if before.get(key) != after.get(key))
