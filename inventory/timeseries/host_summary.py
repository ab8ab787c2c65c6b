"""The fleet board's summary table (inventory.models.HostSummary): written by the periodic job
a set at a time (only the rows that changed, and the set's run stamp, in one transaction), and
read by the board, the set of its window's hour, to count, filter, sort and page in SQL.

The figures are computed elsewhere (inventory.reports.fleet.host_figures, the same function
as the live board); this module only stores them and orders hosts by them. The OOM count and
the collector's staleness, which change by the second, are read live from their own tables
here, with the same definitions as inventory.reports.oom.oom_counts (events of kind OOM with
start <= at <= end) and inventory.reports.collector.collector_health (no sample, or the newest
older than the limit); tests hold the two equal.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.core.exceptions import EmptyResultSet
from django.db import connection, transaction
from django.db.models import QuerySet

from inventory.models import CollectorStatus, Event, Host, HostSummary, HostSummaryRun

# The figure columns, in the order of inventory.reports.fleet.HostFigures' fields.
COLUMNS = (
    "cards", "largest_headroom_bytes", "headroom_card", "worst_fragmentation",
    "fragmentation_status", "p99_status", "p99_detail",
)  # fmt: skip
_TYPES = ("int", "bigint", "text", "float8", "text", "text", "text")

# The board's sorts in SQL, each the order of inventory.reports.fleet.SORTS' key of the same
# name (a stable sort over hosts by name: ties go by name). From this fixed mapping only,
# never from the request. `b` is a row of `_from`.
SORTS = {
    "name": 'b.name COLLATE "C"',  # Python compares code points, as the C collation does
    "headroom": "coalesce(b.largest_headroom_bytes, -1)",
    "fragmentation": "coalesce(b.worst_fragmentation, 0) DESC",
    "ooms": "coalesce(b.n, 0) DESC",
    "p99": "CASE b.p99_status WHEN 'red' THEN 0 WHEN 'unknown' THEN 1 ELSE 2 END",
    # -(age or inf): no sample, and an age of exactly 0 s, first (tied), then the oldest.
    "collector": "nullif(b.last_sample_at, %s) NULLS FIRST",
}


@dataclass(frozen=True)
class Window:
    """What a board request at `now` counts as fresh, stale and recent."""

    now: dt.datetime
    hour: dt.datetime  # the set read: the hour whose two-hour window the board shows
    fresh_since: dt.datetime  # summaries of a run before this are not used
    fresh_until: dt.datetime  # nor of one at or after this (the set's hour was over)
    stale_before: dt.datetime  # a collector whose newest sample is older is stale
    oom_since: dt.datetime  # OOMs counted: oom_since <= at <= now


@dataclass(frozen=True)
class Totals:
    hosts: int  # that the board lists (problems only: those with a problem)
    problems: int  # of them, with a problem
    unsummarised: list[int]  # hosts of the selection with neither a fresh summary nor figures


_UNNEST = ", ".join(f"%s::{kind}[]" for kind in ("bigint", *_TYPES))


def _arrays(figures: dict[int, tuple]) -> list[list]:
    """Host ids and one array a column, for unnest()."""
    ids = list(figures)
    return [ids, *([figures[host][n] for host in ids] for n in range(len(COLUMNS)))]


def write(figures: dict[int, tuple], computed_at: dt.datetime, hour: dt.datetime) -> int:
    """Store every host's figures (a tuple in COLUMNS' order, by host id) for the window of
    `hour`, as computed at `computed_at`, and stamp that set's run, in one transaction; returns
    the rows written. Only rows whose figures changed are written (a quiet fleet costs no row,
    and no WAL, a run). A run older than the one stored for the set writes nothing (two at
    once: the later one stands); a host deleted meanwhile is skipped."""
    table, run = HostSummary._meta.db_table, HostSummaryRun._meta.db_table
    columns = ", ".join(COLUMNS)
    updates = ", ".join(f"{name} = EXCLUDED.{name}" for name in COLUMNS)
    changed = ", ".join(f"{table}.{name}" for name in COLUMNS)
    with transaction.atomic(), connection.cursor() as cursor:
        # The set's run row, locked: runs of a set write one after the other.
        cursor.execute(
            f"INSERT INTO {run} (hour, computed_at) VALUES (%s, 'epoch') ON CONFLICT DO NOTHING",
            [hour],
        )
        cursor.execute(f"SELECT computed_at FROM {run} WHERE hour = %s FOR UPDATE", [hour])
        (last,) = cursor.fetchone()
        if last > computed_at:
            return 0
        cursor.execute(
            f"""
            INSERT INTO {table} (host_id, hour, {columns})
            SELECT f.host_id, %s, {", ".join(f"f.{name}" for name in COLUMNS)}
            FROM unnest({_UNNEST}) AS f(host_id, {columns})
            JOIN {Host._meta.db_table} h ON h.id = f.host_id
            ON CONFLICT (host_id, hour) DO UPDATE SET {updates}
            WHERE ({changed}) IS DISTINCT FROM ({", ".join(f"EXCLUDED.{n}" for n in COLUMNS)})
            """,  # names from the constants above, never from a request
            [hour, *_arrays(figures)],
        )
        written = cursor.rowcount
        cursor.execute(f"UPDATE {run} SET computed_at = %s WHERE hour = %s", [computed_at, hour])
    return written


def forget_before(hour: dt.datetime) -> None:
    """Drop the sets of hours before `hour`: no board reads them again."""
    with transaction.atomic():
        HostSummary.objects.filter(hour__lt=hour).delete()
        HostSummaryRun.objects.filter(hour__lt=hour).delete()


def _from(hosts: QuerySet, window: Window, live: dict[int, tuple]) -> tuple[str, list]:
    """The board's hosts with their figures (a fresh summary, else the figures in `live`, by
    host id: computed for this request), collector status and OOM count, and the params.
    Raises EmptyResultSet for a selection that can hold no host."""
    chosen, chosen_params = hosts.order_by().values("pk").query.sql_with_params()
    columns = ", ".join(COLUMNS)
    # Two joins, not a union of the two sources: a join on the summary's key stays an index
    # lookup for a filter of a few hosts (a union made it 10,000 rows scanned a host).
    figures = ", ".join(
        f"CASE WHEN s.host_id IS NOT NULL THEN s.{name} ELSE f.{name} END AS {name}"
        for name in COLUMNS
    )
    sql = f"""
        SELECT x.*,
               (coalesce(x.fragmentation_status = 'red', false)
                OR coalesce(x.p99_status = 'red', false)
                OR coalesce(x.n, 0) > 0
                OR x.last_sample_at IS NULL OR x.last_sample_at < %s) AS problem
        FROM (
            SELECT h.id, h.name, {figures}, o.n, c.last_sample_at,
                   s.host_id IS NOT NULL OR f.host_id IS NOT NULL AS summarised
            FROM {Host._meta.db_table} h
            LEFT JOIN {HostSummary._meta.db_table} s
              ON s.host_id = h.id AND s.hour = %s AND s.host_id <> ALL(%s::bigint[]) AND EXISTS (
                  SELECT FROM {HostSummaryRun._meta.db_table}
                  WHERE hour = %s AND computed_at >= %s AND computed_at < %s)
            LEFT JOIN unnest({_UNNEST}) AS f(host_id, {columns}) ON f.host_id = h.id
            LEFT JOIN {CollectorStatus._meta.db_table} c ON c.host_id = h.id
            LEFT JOIN (
                SELECT host_id, count(*) AS n FROM {Event._meta.db_table}
                WHERE kind = %s AND at >= %s AND at <= %s GROUP BY host_id
            ) o ON o.host_id = h.id
            WHERE h.id IN ({chosen})
        ) x
    """  # names from the constants above and the ORM's own SQL, never from a request
    arrays = _arrays(live)
    params = [
        window.stale_before,
        window.hour,
        arrays[0],
        window.hour,
        window.fresh_since,
        window.fresh_until,
        *arrays,
        Event.Kind.OOM.value,
        window.oom_since,
        window.now,
        *chosen_params,
    ]
    return sql, params


def totals(
    hosts: QuerySet, window: Window, live: dict[int, tuple], *, problems_only: bool
) -> Totals:
    try:
        board, params = _from(hosts, window, live)
    except EmptyResultSet:
        return Totals(0, 0, [])
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT count(*), count(*) FILTER (WHERE problem),
                   array_agg(id) FILTER (WHERE NOT summarised)
            FROM ({board}) b
            """,
            params,
        )
        every, problems, unsummarised = cursor.fetchone()
    return Totals(problems if problems_only else every, problems, unsummarised or [])


def ordered(
    hosts: QuerySet,
    window: Window,
    live: dict[int, tuple],
    sort: str,
    *,
    problems_only: bool,
    problems_first: bool,
    offset: int = 0,
    limit: int | None = None,
) -> list[tuple]:
    """The board's hosts in its order, from `offset`, at most `limit`: (host id, figures in
    COLUMNS' order; None for a host with neither a fresh summary nor figures in `live`)."""
    try:
        board, params = _from(hosts, window, live)
    except EmptyResultSet:
        return []
    order = SORTS.get(sort, SORTS["name"])  # as sorted_rows: an unknown sort is by name
    order_params = [window.now] if "%s" in order else []
    figures = ", ".join(f"b.{name}" for name in COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT b.id, {figures} FROM ({board}) b
            {"WHERE b.problem" if problems_only else ""}
            ORDER BY {"NOT b.problem, " if problems_first else ""}{order}, b.name
            LIMIT %s OFFSET %s
            """,  # the order from SORTS, never from the request
            [*params, *order_params, limit, offset],
        )
        return cursor.fetchall()
