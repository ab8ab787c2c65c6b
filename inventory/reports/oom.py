"""OOM events: triage from the snapshot stored with each, and the history managers review."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from django.db.models import Count

from inventory.analytics.oom_triage import OomEvent, OomTriage, triage_oom
from inventory.analytics.snapshot import CardSnapshot, ProcessSnapshot, allocator_from_batch
from inventory.models import Event

# "OOMs lately" on the fleet board and in /metrics.
OOM_WINDOW = dt.timedelta(hours=24)


def oom_counts(
    by: Literal["host", "gpu"], ids: list[int], start: dt.datetime, end: dt.datetime
) -> dict[int, int]:
    """OOM events per host (or per card) id with `start <= at <= end`; ids without any are
    left out. The one count behind the fleet board, /metrics and the memory gate."""
    return dict(
        Event.objects.filter(
            kind=Event.Kind.OOM, **{f"{by}_id__in": ids}, at__gte=start, at__lte=end
        )
        .order_by()
        .values(f"{by}_id")
        .annotate(n=Count("pk"))
        .values_list(f"{by}_id", "n")
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
