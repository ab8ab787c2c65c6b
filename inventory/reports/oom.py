"""OOM events counted over a window: the one count behind the fleet board, /metrics and the gate."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from django.db.models import Count

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
