"""The fleet board in its order, counted, filtered, sorted and paged in SQL over each host's
figures kept in a summary table.

The order (hosts with a problem first, then the chosen sort, ties by name) needs every host's
figures before page 1 can be cut. Computed on each request that is every card's two-hour
peaks and a row per host (0.8 s at 10,000 hosts); the periodic job (refresh_host_summaries,
beat every HOST_SUMMARY_INTERVAL_S) keeps each host's figures in inventory.models.HostSummary,
computed by the same host_figures as a live row, so SQL can order the fleet and only the
page's hosts are read into rows.

The summaries come in sets, one a window hour: the board reads its hour's set (a two-hour
window holds that hour's buckets and the one before). A run in the last
HOST_SUMMARY_STALE_AFTER_S of an hour also writes the next hour's set, computed for the moment
the hour turns from what the rollups hold then, so at the turn the board finds a fresh set,
as fresh as any run's. A host whose summary is missing (a new host) or not fresh (its set's run
older than HOST_SUMMARY_STALE_AFTER_S: the job stopped) has its figures computed for the
request, live, and handed to the same SQL: slower the more such hosts there are (every host,
while the job is stopped: the board's cost before the table), never wrong. OOMs in 24 h and the
collector's health are read live either way, so an agent that stops reporting is stale on the
board as soon as it would have been without the table.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from inventory.models import Host
from inventory.reports.fleet import HostFigures, HostRow, host_figures, host_row
from inventory.reports.oom import OOM_WINDOW, oom_counts
from inventory.timeseries import host_summary

HOUR = dt.timedelta(hours=1)


@dataclass
class Board:
    rows: SummaryRows  # in the board's order; slice it for a page
    problem_hosts: int
    computed_live: int  # hosts whose figures this request computed (no fresh summary)


def window(now: dt.datetime) -> host_summary.Window:
    # The two-hour window holds the hourly buckets of now's hour and the one before, so a
    # summary is exact until its hour ends (or until the rollups change: the job runs again).
    hour = now.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    stale_after = dt.timedelta(seconds=settings.HOST_SUMMARY_STALE_AFTER_S)
    return host_summary.Window(
        now=now,
        hour=hour,
        fresh_since=now - stale_after,
        fresh_until=hour + HOUR,
        stale_before=now - dt.timedelta(seconds=settings.COLLECTOR_STALE_AFTER_S),
        oom_since=now - OOM_WINDOW,
    )


def board(
    hosts: QuerySet[Host],
    sort: str,
    *,
    problems_only: bool,
    problems_first: bool = True,
    now: dt.datetime | None = None,
) -> Board:
    """The board over these hosts (a queryset: the visible, filtered ones), in its order:
    problems first (unless not `problems_first`: the CSV), then `sort`, ties by name."""
    now = now or timezone.now()
    span = window(now)
    totals = host_summary.totals(hosts, span, {}, problems_only=problems_only)
    live: dict[int, tuple] = {}
    if totals.unsummarised:
        figures = host_figures(totals.unsummarised, now)
        live = {host_id: _columns(f) for host_id, f in figures.items()}
        totals = host_summary.totals(hosts, span, live, problems_only=problems_only)
    rows = SummaryRows(hosts, span, live, sort, problems_only, problems_first, totals.hosts)
    return Board(rows, totals.problems, computed_live=len(live))


class SummaryRows:
    """The board's rows in order, read only for the slice asked for (what Django's Paginator
    needs: a length and slices)."""

    def __init__(self, hosts, span, live, sort, problems_only, problems_first, count):
        self.hosts, self.span, self.live, self.sort = hosts, span, live, sort
        self.problems_only, self.problems_first, self.count_ = problems_only, problems_first, count

    def __len__(self) -> int:
        return self.count_

    def __iter__(self):
        return iter(self[:])

    def __getitem__(self, item):
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("the board's rows are read by slices")
        start, stop, _ = item.indices(self.count_)
        if stop <= start:
            return []
        found = host_summary.ordered(
            self.hosts, self.span, self.live, self.sort, problems_only=self.problems_only,
            problems_first=self.problems_first, offset=start, limit=stop - start,
        )  # fmt: skip
        return self._rows(found)

    def _rows(self, found: list[tuple]) -> list[HostRow]:
        ids = [row[0] for row in found]
        hosts = self.hosts.in_bulk(ids)
        now = self.span.now
        # The one count of OOMs, for the page's hosts (the order counted them the same way).
        ooms = oom_counts("host", ids, self.span.oom_since, now)
        # A host deleted between the queries is left out; one made between them and not yet
        # summarised has no figures (None): unknown for a moment, until the next refresh.
        return [
            host_row(hosts[host_id], _figures(figures), ooms.get(host_id, 0), now)
            for host_id, *figures in found
            if host_id in hosts
        ]


def _columns(f: HostFigures) -> tuple:
    """A host's figures in the summary table's column order (host_summary.COLUMNS)."""
    return (f.cards, f.largest_headroom_bytes, f.headroom_card, f.worst_fragmentation,
            f.fragmentation_status, f.p99_status, f.p99_detail)  # fmt: skip


def _figures(columns: list) -> HostFigures:
    if columns[0] is None:
        return HostFigures(0, None, "", None, None, "unknown", "")
    return HostFigures(*columns)


def refresh_summaries(now: dt.datetime | None = None) -> int:
    """Compute every host's figures at `now` (host_figures, the live board's function) and
    store those that changed, in the set of now's hour; in the last HOST_SUMMARY_STALE_AFTER_S
    of the hour, the set of the next hour too, its figures those at the hour's turn from what
    the rollups hold now. The periodic job's work. Idempotent; returns the rows written."""
    now = now or timezone.now()
    span = window(now)
    ids = list(Host.objects.order_by().values_list("pk", flat=True))
    sets = {span.hour: now}
    turn = span.hour + HOUR
    if turn - now <= dt.timedelta(seconds=settings.HOST_SUMMARY_STALE_AFTER_S):
        sets[turn] = turn
    written = 0
    for hour, moment in sets.items():
        figures = host_figures(ids, moment)
        columns = {host_id: _columns(f) for host_id, f in figures.items()}
        written += host_summary.write(columns, now, hour)
    host_summary.forget_before(span.hour)
    return written
