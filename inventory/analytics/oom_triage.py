"""OOM triage: which of three causes an out-of-memory event had, from its stored snapshot.

Quantities (card figures from NVML, pools from each process's caching allocator):

- usable = total - driver reserved; card free = NVML free;
- pool free = sum over processes of (allocator reserved - allocated);
- releasable = pool free minus inactive split bytes: what the allocators could hand back to
  the card (``empty_cache`` only returns whole unused segments; a segment with one live block
  stays, so its split free blocks stay too);
- demand = usable - card free - pool free: what processes really had allocated.

Decision order, first match wins:

1. ``insufficient_data`` if the request size, card free or usable is unknown, if no process
   has allocator statistics (demand and cache are then indistinguishable), or if card free
   already covered the request (the snapshot does not show the moment of failure);
2. ``true_peak`` if card free + pool free < request: even with every cache released and
   every pool compacted, demand plus the request exceeds usable memory;
3. ``allocator_reserve`` if card free + releasable >= request: memory hoarded by caching
   allocators, usually another process's, would have satisfied it once released;
4. ``fragmentation`` otherwise: the free bytes were there but in split blocks, none large
   enough, that no allocator can return.

Confidence is ``high`` with allocator statistics for every process, ``medium`` when a process
lacks them (counted as all demand) or lacks inactive split (its pool free counted as
releasable), ``low`` when the failing process's own largest free block would have fit.
"""

from dataclasses import dataclass
from enum import StrEnum

from inventory.analytics.reasons import Reason, gettext_noop, register, render
from inventory.analytics.snapshot import (
    AllocatorStats,
    CardSnapshot,
    ProcessSnapshot,
    allocator_from_batch,
)

# What a triage says, by code: the explanation and caveats are stored as these codes with
# their figures (inventory.analytics.reasons), and read in the reader's language.
MESSAGES = register(
    {
        "oom.explanation": gettext_noop("needed {request:gib}; card free {free:gib}; {detail}"),
        "oom.true_peak": gettext_noop(
            "processes allocated {demand:gib} of {usable:gib} usable: true peak"
        ),
        "oom.allocator_reserve": gettext_noop(
            "allocators held {pool_free:gib} reserved but unallocated, {releasable:gib} "
            "releasable (most by {holder}: {holder_releasable:gib}): allocator reserve"
        ),
        "oom.fragmentation": gettext_noop(
            "{pool_free:gib} free inside allocator pools but only {releasable:gib} releasable: "
            "fragmentation"
        ),
        "oom.fragmentation_block": gettext_noop(
            "{pool_free:gib} free inside allocator pools but only {releasable:gib} releasable, "
            "largest free block {block:gib}: fragmentation"
        ),
        "oom.insufficient_data": gettext_noop(
            "{missing}: cannot tell demand from cached or fragmented memory"
        ),
        "oom.already_covered": gettext_noop(
            "needed {request:gib}; card free {free:gib} already covers it: the snapshot does "
            "not show the moment of failure"
        ),
        "oom.missing.request": gettext_noop("failed allocation size unknown"),
        "oom.missing.card_free": gettext_noop("card free memory unknown"),
        "oom.missing.driver_reserve": gettext_noop("driver reserve unknown"),
        "oom.missing.allocator": gettext_noop("no allocator statistics for any process"),
        "oom.caveat.inconsistent": gettext_noop("snapshot inconsistent with the failure"),
        "oom.caveat.no_allocator": gettext_noop(
            "{process} has no allocator statistics, counted as all demand"
        ),
        "oom.caveat.no_split": gettext_noop(
            "{process} reports no inactive split, its pool free counted as releasable"
        ),
        "oom.caveat.own_block_fits": gettext_noop(
            "the failing process's own largest free block would have fit"
        ),
    }
)


class OomCause(StrEnum):
    TRUE_PEAK = "true_peak"
    ALLOCATOR_RESERVE = "allocator_reserve"
    FRAGMENTATION = "fragmentation"
    INSUFFICIENT_DATA = "insufficient_data"


class Confidence(StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    NONE = "none"


@dataclass(frozen=True)
class OomEvent:
    snapshot: CardSnapshot
    requested_bytes: int | None
    failed_pid: int | None = None


@dataclass(frozen=True)
class OomTriage:
    cause: OomCause
    confidence: Confidence
    reason: Reason
    # What was missing or had to be assumed, one phrase each.
    caveat_reasons: tuple[Reason, ...]
    requested_bytes: int | None = None
    card_free_bytes: int | None = None
    usable_bytes: int | None = None
    demand_bytes: int | None = None
    pool_free_bytes: int | None = None
    releasable_bytes: int | None = None
    largest_free_block_bytes: int | None = None

    @property
    def explanation(self) -> str:
        """In English; pages render ``reason`` in the reader's language."""
        return render(self.reason)

    @property
    def caveats(self) -> tuple[str, ...]:
        return tuple(render(caveat) for caveat in self.caveat_reasons)


def _card_free_and_usable(snapshot: CardSnapshot) -> tuple[int | None, int | None]:
    total, reserved = snapshot.total_bytes, snapshot.driver_reserved_bytes
    used, free = snapshot.used_bytes, snapshot.free_bytes
    if reserved is None and used is not None and free is not None:
        reserved = max(total - used - free, 0)
    if free is None and reserved is not None and used is not None:
        free = max(total - reserved - used, 0)
    return free, None if reserved is None else total - reserved


def _releasable(stats: AllocatorStats) -> int:
    return stats.pool_free_bytes - (stats.inactive_split_bytes or 0)


def triage_oom(event: OomEvent) -> OomTriage:
    snapshot, request = event.snapshot, event.requested_bytes
    free, usable = _card_free_and_usable(snapshot)
    pools = [(p, p.allocator) for p in snapshot.processes if p.allocator is not None]

    missing = [
        Reason(code)
        for code, absent in (
            ("oom.missing.request", request is None),
            ("oom.missing.card_free", free is None),
            ("oom.missing.driver_reserve", usable is None),
            ("oom.missing.allocator", not pools),
        )
        if absent
    ]
    if missing or request is None or free is None or usable is None:
        return OomTriage(
            OomCause.INSUFFICIENT_DATA,
            Confidence.NONE,
            Reason("oom.insufficient_data", {"missing": missing}),
            tuple(missing),
            request,
            free,
            usable,
        )
    if free >= request:
        return OomTriage(
            OomCause.INSUFFICIENT_DATA,
            Confidence.NONE,
            Reason("oom.already_covered", {"request": request, "free": free}),
            (Reason("oom.caveat.inconsistent"),),
            request,
            free,
            usable,
        )

    caveats = [
        Reason("oom.caveat.no_allocator", {"process": p.label})
        for p in snapshot.processes
        if p.allocator is None
    ]
    caveats += [
        Reason("oom.caveat.no_split", {"process": p.label})
        for p, stats in pools
        if stats.inactive_split_bytes is None and stats.pool_free_bytes > 0
    ]
    confidence = Confidence.MEDIUM if caveats else Confidence.HIGH

    pool_free = sum(stats.pool_free_bytes for _, stats in pools)
    releasable = sum(_releasable(stats) for _, stats in pools)
    demand = usable - free - pool_free
    failed = [(p, s) for p, s in pools if p.pid is not None and p.pid == event.failed_pid]
    # The failing process's own pool is the one that had no block; others' only if unknown.
    blocks = [
        stats.largest_free_block_bytes
        for _, stats in (failed or pools)
        if stats.largest_free_block_bytes is not None
    ]
    largest_block = max(blocks, default=None)
    if failed and largest_block is not None and largest_block >= request:
        confidence = Confidence.LOW
        caveats.append(Reason("oom.caveat.own_block_fits"))

    if free + pool_free < request:
        cause = OomCause.TRUE_PEAK
        detail = Reason("oom.true_peak", {"demand": demand, "usable": usable})
    elif free + releasable >= request:
        cause = OomCause.ALLOCATOR_RESERVE
        holder, holder_stats = max(pools, key=lambda pool: _releasable(pool[1]))
        detail = Reason(
            "oom.allocator_reserve",
            {
                "pool_free": pool_free,
                "releasable": releasable,
                "holder": holder.label,
                "holder_releasable": _releasable(holder_stats),
            },
        )
    else:
        cause = OomCause.FRAGMENTATION
        figures = {"pool_free": pool_free, "releasable": releasable}
        detail = (
            Reason("oom.fragmentation", figures)
            if largest_block is None
            else Reason("oom.fragmentation_block", {**figures, "block": largest_block})
        )
    return OomTriage(
        cause,
        confidence,
        Reason("oom.explanation", {"request": request, "free": free, "detail": detail}),
        tuple(caveats),
        request,
        free,
        usable,
        demand,
        pool_free,
        releasable,
        largest_block,
    )


def triage_snapshot(snapshot: dict, failed_pid: int | None = None) -> OomTriage:
    """Classify an OOM from the snapshot ingest stored with the event.

    A MIG instance's OOM is judged against the instance (its capacity, no driver reserve);
    a whole card's against the card's total and driver reserve.
    """
    if snapshot.get("capacity_bytes") is not None:
        total, reserved = snapshot["capacity_bytes"], 0
    else:
        total = snapshot.get("card_total_bytes") or 0
        reserved = snapshot.get("card_reserved_bytes")
    card = CardSnapshot(
        card_id="",
        at=0.0,
        total_bytes=total,
        driver_reserved_bytes=reserved,
        free_bytes=snapshot.get("free_bytes"),
        processes=tuple(
            ProcessSnapshot(
                pid=process.get("pid"),
                deployment=str(process.get("deployment_id") or "") or None,
                used_bytes=process.get("used_bytes"),
                allocator=allocator_from_batch(process.get("allocator")),
            )
            for process in snapshot.get("processes", [])
        ),
    )
    return triage_oom(OomEvent(card, snapshot.get("requested_bytes"), failed_pid))
