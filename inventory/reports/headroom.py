"""Card headroom over the recent window: the one source of the figure for the host page, the
ledger API, the fleet board and /metrics.

The basis is the hourly rollups whose buckets start in the last two hours (so between one and
two hours of data plus the current hour): peak used and peak driver reserve, beside the card's
total. One query serves the whole fleet.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from inventory.analytics.headroom import card_headroom_bytes
from inventory.timeseries import queries
from inventory.timeseries.queries import CardPeaks

RECENT = dt.timedelta(hours=2)


@dataclass(slots=True)  # one per card of the fleet: not frozen, see CardPeaks
class CardHeadroom:
    peaks: CardPeaks
    headroom_bytes: int | None  # None: nothing measured in the window


def recent_card_headroom(host_ids: list[int], now: dt.datetime) -> list[CardHeadroom]:
    """Every card of these hosts, ordered by host and index, with its headroom at `now`."""
    return [
        CardHeadroom(
            peaks,
            card_headroom_bytes(
                peaks.total_bytes, peaks.driver_reserved_bytes, peaks.used_peak_bytes
            ),
        )
        for peaks in queries.card_peaks(host_ids, now - RECENT, now)
    ]
