"""OOM events: triage from the snapshot stored with each, and the history managers review."""

from __future__ import annotations

from inventory.analytics.oom_triage import OomEvent, OomTriage, triage_oom
from inventory.analytics.snapshot import AllocatorStats, CardSnapshot, ProcessSnapshot


def _allocator(raw: dict | None) -> AllocatorStats | None:
    if not raw or raw.get("reserved_bytes") is None or raw.get("allocated_bytes") is None:
        return None
    try:
        return AllocatorStats(
            reserved_bytes=raw["reserved_bytes"],
            allocated_bytes=raw["allocated_bytes"],
            inactive_split_bytes=raw.get("inactive_split_bytes"),
            largest_free_block_bytes=raw.get("largest_free_block_bytes"),
        )
    except ValueError:  # figures taken at slightly different instants can disagree
        return None


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
                allocator=_allocator(process.get("allocator")),
            )
            for process in snapshot.get("processes", [])
        ),
    )
    return triage_oom(OomEvent(card, snapshot.get("requested_bytes"), failed_pid))
