"""Pictures of records and what differs between two of them; no models of ours imported.

console/core/auditing/models.py imports this module, so it must not import the models back.
"""

import datetime
import decimal
import hashlib
import uuid
from typing import Any


def snapshot(obj, *, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JSON-safe picture of a model instance: concrete fields and many-to-many ids.

    A model's SECRET_FIELDS appear as a fingerprint, so a rotation shows and the secret never.
    """
    opts = obj._meta
    hidden = getattr(type(obj), "SECRET_FIELDS", ())
    data: dict[str, Any] = {}
    for field in opts.concrete_fields:
        if field.name in hidden:
            data[field.attname] = _fingerprint(field.value_from_object(obj))
        elif field.name not in exclude:
            data[field.attname] = _json_safe(field.value_from_object(obj))
    if obj.pk is not None:
        for field in opts.many_to_many:
            if field.name not in exclude:
                data[field.name] = sorted(
                    _json_safe(pk) for pk in getattr(obj, field.name).values_list("pk", flat=True)
                )
    return data


def _fingerprint(secret: str) -> str:
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()[:12] if secret else ""


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


# Timestamps change on every save; listing them would hide what really changed.
_BOOKKEEPING = {"created_at", "updated_at"}


def changed_fields(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[str]:
    before, after = before or {}, after or {}
    keys = (before.keys() | after.keys()) - _BOOKKEEPING
    return sorted(key for key in keys if before.get(key) != after.get(key))
