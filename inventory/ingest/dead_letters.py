"""Dead letters: the messages ingest could not write, kept in PostgreSQL with their reason.

The ingest worker keeps each one here and acknowledges it, so it never blocks the queue nor
comes back by itself; a person replays it (after registering its host, say) or discards it
(inventory.services). A replay goes through ingest as any batch does, so it writes once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from inventory.ingest.signatures import Signed, check_signatures
from inventory.ingest.writer import IngestResult, ingest_batches
from inventory.models import DeadLetter
from inventory.wire.schema import BatchRejected

# What a dead letter keeps of a message larger than the worker accepts.
KEPT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Letter:
    body: bytes
    payload: Any  # the decoded JSON, or None where it did not decode
    rejected: BatchRejected
    signature: str | None = None


def keep(letters: list[Letter]) -> list[DeadLetter]:
    return DeadLetter.objects.bulk_create(
        [
            DeadLetter(
                body=letter.body[:KEPT_BYTES],
                size=len(letter.body),
                host_name=_claimed(letter.payload, "host", 100),
                batch_id=_claimed(letter.payload, "batch_id", 64),
                reason_code=letter.rejected.code[:32],
                reason_path=letter.rejected.path[:200],
                reason=letter.rejected.message.replace("\x00", "\\x00")[:4000],
                reason_message=storable(letter.rejected),
                signature=(letter.signature or "")[:100],
            )
            for letter in letters
        ]
    )


def replay(letter: DeadLetter) -> IngestResult | BatchRejected:
    """Run the stored message through the signature check and ingest again; database errors
    propagate."""
    body = bytes(letter.body)
    if letter.size > len(body):
        return BatchRejected("too_large", "cut")
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        return BatchRejected("not_json", "error", error=str(error))
    (forged,) = check_signatures([Signed(payload, body, letter.signature or None)])
    return forged or ingest_batches([payload])[0]


def storable(rejected: BatchRejected) -> dict:
    """The rejection's reason as a JSON column takes it: PostgreSQL's jsonb holds no NUL, and
    a quoted value is bounded as the text reason is."""
    return _bounded(rejected.reason())


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\\x00")[:4000]
    if isinstance(value, dict):
        return {key: _bounded(item) for key, item in value.items()}
    return value


def decoded(letter: DeadLetter) -> Any:
    """The stored message as JSON where it is JSON, for people to read."""
    try:
        return orjson.loads(bytes(letter.body))
    except orjson.JSONDecodeError:
        return None


def _claimed(payload: Any, key: str, length: int) -> str:
    value = payload.get(key) if isinstance(payload, dict) else None
    return value.replace("\x00", "")[:length] if isinstance(value, str) else ""
