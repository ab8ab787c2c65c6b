"""The fleet board's row per host: headroom, worst fragmentation, P99, OOMs, collector health.

Built with one query per figure over the whole fleet (never one per host), from the hourly
rollups of the last two hours. host_figures is the one computation of the figures, for a row
computed live and for the summary table the board sorts and pages by (inventory.reports.board).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, fields

from django.utils import timezone

from inventory.analytics.headroom import largest_headroom
from inventory.models import Host
from inventory.reports.collector import collector_health
from inventory.reports.headroom import RECENT, recent_card_headroom
from inventory.reports.oom import OOM_WINDOW, oom_counts
from inventory.reports.thresholds import fragmentation_thresholds
from inventory.timeseries import queries


@dataclass(slots=True)
class HostFigures:
    """What a host's cards and engines measured over the last two hours, as the board shows
    it: the part of a row that the board's summary table keeps (inventory.models.HostSummary;
    the order of the fields is the order of its columns)."""

    cards: int
    largest_headroom_bytes: int | None  # the best single card: capacity never adds up
    headroom_card: str
    worst_fragmentation: float | None
    fragmentation_status: str | None
    p99_status: str  # green / red / unknown
    p99_detail: str


@dataclass
class HostRow(HostFigures):
    """A board row: the host's figures and what is read live beside them."""

    host: Host
    ooms_24h: int
    collector: dict

    @property
    def problems(self) -> bool:
        return (
            self.fragmentation_status == "red"
            or self.p99_status == "red"
            or self.ooms_24h > 0
            or self.collector["stale"]
        )


def host_row(host: Host, figures: HostFigures, ooms_24h: int, now: dt.datetime) -> HostRow:
    return HostRow(
        **{field.name: getattr(figures, field.name) for field in fields(HostFigures)},
        host=host,
        ooms_24h=ooms_24h,
        collector=collector_health(getattr(host, "collector_status", None), now),
    )


def host_figures(host_ids: list[int], now: dt.datetime) -> dict[int, HostFigures]:
    """Every one of these hosts' figures at `now`, by host id: one query per figure for the
    whole fleet (never one per host). The one computation behind the live board and the
    summary table."""
    cards: dict[int, list] = {}
    for card in recent_card_headroom(host_ids, now):
        cards.setdefault(card.peaks.host_id, []).append(card)
    latency: dict[int, list] = {}
    for row in queries.latency_p99_peaks(host_ids, now - RECENT, now):
        latency.setdefault(row["host_id"], []).append((row["name"], row["p99_s"], row["slo_ms"]))
    thresholds = fragmentation_thresholds()
    figures = {}
    for host_id in host_ids:
        host_cards = cards.get(host_id, [])
        best = largest_headroom((card.headroom_bytes, card.peaks.index) for card in host_cards)
        frags = [
            card.peaks.fragmentation_index_peak
            for card in host_cards
            if card.peaks.fragmentation_index_peak is not None
        ]
        worst = max(frags, default=None)
        p99_status, p99_detail = _p99(latency.get(host_id, []))
        figures[host_id] = HostFigures(
            cards=len(host_cards),
            largest_headroom_bytes=None if best is None else best[0],
            headroom_card=f"card {best[1]}" if best else "",
            worst_fragmentation=worst,
            fragmentation_status=None if worst is None else thresholds.classify(worst).value,
            p99_status=p99_status,
            p99_detail=p99_detail,
        )
    return figures


def fleet_rows(hosts: list[Host], now: dt.datetime | None = None) -> list[HostRow]:
    """Every one of these hosts' rows, computed live."""
    now = now or timezone.now()
    ids = [host.pk for host in hosts]
    figures = host_figures(ids, now)
    ooms = oom_counts("host", ids, now - OOM_WINDOW, now)
    return [host_row(host, figures[host.pk], ooms.get(host.pk, 0), now) for host in hosts]


def _p99(rows: list[tuple]) -> tuple[str, str]:
    measured = [(name, p99, slo) for name, p99, slo in rows if p99 is not None and slo]
    if not measured:
        return "unknown", "no latency with an SLO in the last two hours"
    over = [(name, p99, slo) for name, p99, slo in measured if p99 * 1000 > slo]
    if over:
        name, p99, slo = max(over, key=lambda row: row[1] * 1000 / row[2])
        return "red", f"{name}: P99 {p99 * 1000:.0f} ms over its {slo} ms SLO"
    return "green", f"{len(measured)} model(s) within their P99 SLO"


# The board's order, defined on rows: inventory.timeseries.host_summary.SORTS is the same order
# in SQL, over the summary table (tests/inventory/test_fleet_board.py holds the two equal).
SORTS = {
    "name": lambda row: row.host.name,
    "headroom": lambda row: (
        -1 if row.largest_headroom_bytes is None else row.largest_headroom_bytes
    ),
    "fragmentation": lambda row: -(row.worst_fragmentation or 0),
    "ooms": lambda row: -row.ooms_24h,
    "p99": lambda row: {"red": 0, "unknown": 1, "green": 2}[row.p99_status],
    "collector": lambda row: -(row.collector["age_s"] or float("inf")),
}


def sorted_rows(rows: list[HostRow], key: str) -> list[HostRow]:
    return sorted(rows, key=SORTS.get(key, SORTS["name"]))
