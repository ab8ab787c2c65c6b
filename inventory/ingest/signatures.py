"""Which batches really come from the host they name: the HMAC each carries, checked.

A host collected through NVML signs its batches with its own secret; a batch for it that is
unsigned, or signed with another key, or changed on the way, is refused. Simulated hosts are
the console's own demo, driven by the simulator agent, and sign nothing. A batch for a host
the inventory does not know is left to ingest, which refuses it with that reason.
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
    secrets = {
        name: None if collector == Host.Collector.SIMULATED else secret
        for name, collector, secret in Host.objects.filter(name__in=names).values_list(
            "name", "collector", "agent_secret"
        )
    }
    return [_check(batch, secrets) for batch in batches]


def _check(batch: Signed, secrets: dict[str, str | None]) -> BatchRejected | None:
    host = _host(batch.payload)
    if host not in secrets or secrets[host] is None or not settings.INGEST_REQUIRE_SIGNATURE:
        return None
    if not batch.signature:
        return BatchRejected("unsigned", "unsigned", host=host, header=signing.HEADER)
    if not signing.verify(secrets[host], batch.body, batch.signature):
        return BatchRejected("bad_signature", "bad_signature", host=host)
    return None


def _host(payload: Any) -> str | None:
    """The host a batch names, where that could be a host's name at all (the batch check
    refuses the rest, such as text with a NUL byte, which the database cannot even look up)."""
    host = payload.get("host") if isinstance(payload, dict) else None
    return host if isinstance(host, str) and HOST_NAME_PATTERN.fullmatch(host) else None
