"""Which batches really come from the host they name: the HMAC each carries, checked.

Authentication follows the secret, not the collector: a host that holds a secret (every host
registered since agents sign, simulated ones included: the demo's simulator agents get theirs
at seeding) takes only batches signed with it; one unsigned, signed with another key, or
changed on the way, is refused. The collector type is what the inventory says, not proof of
anything: a check that skipped simulated hosts let anyone who reaches the broker write their
figures and start automation on them.

A host without a secret has nothing to check a batch against: its unsigned batches are written,
as telemetry no one can vouch for, and nothing acts on them (console.operations refuses host
actions, standing policies and degradation for it). A batch that carries a signature for such
a host is refused: its sender holds a key the console never issued for it.
A batch for a host the inventory does not know is left to ingest, which refuses it with that
reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from inventory.models import Host
from inventory.models.fleet import HOST_NAME_PATTERN
from inventory.wire import signing
from inventory.wire.schema import BatchRejected


@dataclass(frozen=True)
class Signed:
    payload: Any
    body: bytes
    signature: str | None


def check_signatures(batches: list[Signed]) -> list[BatchRejected | None]:
    """One answer per batch: None where it may go on to ingest, else why it may not."""
    names = {_host(batch.payload) for batch in batches} - {None}
    secrets = dict(
        Host.objects.filter(name__in=names).values_list("name", "agent_secret").order_by()
    )
    return [_check(batch, secrets) for batch in batches]


def _check(batch: Signed, secrets: dict[str, str]) -> BatchRejected | None:
    host = _host(batch.payload)
    if host not in secrets or not settings.INGEST_REQUIRE_SIGNATURE:
        return None
    secret = secrets[host]
    if not secret:
        if batch.signature:
            return BatchRejected("bad_signature", "no_secret", host=host)
        return None
    if not batch.signature:
        return BatchRejected("unsigned", "unsigned", host=host, header=signing.HEADER)
    if not signing.verify(secret, batch.body, batch.signature):
        return BatchRejected("bad_signature", "bad_signature", host=host)
    return None


def _host(payload: Any) -> str | None:
    """The host a batch names, where that could be a host's name at all (the batch check
    refuses the rest, such as text with a NUL byte, which the database cannot even look up)."""
    host = payload.get("host") if isinstance(payload, dict) else None
    return host if isinstance(host, str) and HOST_NAME_PATTERN.fullmatch(host) else None
