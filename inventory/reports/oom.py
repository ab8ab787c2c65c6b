"""OOM events counted over a window: the one count behind the fleet board and the gate
(/metrics counts the whole history: `inventory.reports.event_totals`)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from inventory.models import Event
from inventory.timeseries import queries

# "OOMs lately" on the fleet board.
OOM_WINDOW = dt.timedelta(hours=24)


def oom_counts(
    by: Literal["host", "gpu"], ids: list[int], start: dt.datetime, end: dt.datetime
) -> dict[int, int]:
    """OOM events per host (or per card) id with `start <= at <= end`; ids without any are
    left out. The one count behind the fleet board and the memory gate."""
    return queries.event_counts(Event.Kind.OOM.value, by, ids, start, end)
