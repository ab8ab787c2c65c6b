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

from inventory.analytics.snapshot import (
    AllocatorStats,
    CardSnapshot,
    ProcessSnapshot,
    allocator_from_batch,
)
from inventory.analytics.units import format_gib


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
    explanation: str
    # What was missing or had to be assumed, one phrase each.
    caveats: tuple[str, ...]
    requested_bytes: int | None = None
    card_free_bytes: int | None = None
    usable_bytes: int | None = None
    demand_bytes: int | None = None
    pool_free_bytes: int | None = None
    releasable_bytes: int | None = None
    largest_free_block_bytes: int | None = None


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
        phrase
        for phrase, absent in (
            ("failed allocation size unknown", request is None),
            ("card free memory unknown", free is None),
            ("driver reserve unknown", usable is None),
            ("no allocator statistics for any process", not pools),
        )
        if absent
    ]
    if missing or request is None or free is None or usable is None:
        return OomTriage(
            OomCause.INSUFFICIENT_DATA,
            Confidence.NONE,
            "; ".join(missing) + ": cannot tell demand from cached or fragmented memory",
            tuple(missing),
            request,
            free,
            usable,
        )
    if free >= request:
        return OomTriage(
            OomCause.INSUFFICIENT_DATA,
            Confidence.NONE,
            f"needed {format_gib(request)}; card free {format_gib(free)} already covers it: "
            "the snapshot does not show the moment of failure",
            ("snapshot inconsistent with the failure",),
            request,
            free,
            usable,
        )

    caveats = [
        f"{p.label} has no allocator statistics, counted as all demand"
        for p in snapshot.processes
        if p.allocator is None
    ]
    caveats += [
        f"{p.label} reports no inactive split, its pool free counted as releasable"
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
        caveats.append("the failing process's own largest free block would have fit")

    needed = f"needed {format_gib(request)}; card free {format_gib(free)}"
    if free + pool_free < request:
        cause = OomCause.TRUE_PEAK
        detail = (
            f"processes allocated {format_gib(demand)} of {format_gib(usable)} usable: true peak"
        )
    elif free + releasable >= request:
        cause = OomCause.ALLOCATOR_RESERVE
        holder, holder_stats = max(pools, key=lambda pool: _releasable(pool[1]))
        detail = (
            f"allocators held {format_gib(pool_free)} reserved but unallocated, "
            f"{format_gib(releasable)} releasable (most by {holder.label}: "
            f"{format_gib(_releasable(holder_stats))}): allocator reserve"
        )
    else:
        cause = OomCause.FRAGMENTATION
        block = "" if largest_block is None else f", largest free block {format_gib(largest_block)}"
        detail = (
            f"{format_gib(pool_free)} free inside allocator pools but only "
            f"{format_gib(releasable)} releasable{block}: fragmentation"
        )
    return OomTriage(
        cause,
        confidence,
        f"{needed}; {detail}",
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
