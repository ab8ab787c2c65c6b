"""A week's P95 of running requests without ranking every minute of it at each scrape.

`/metrics`' KV gap needs each deployment's P95 of its minutes' peaks of running requests over
7 days: ranked from the minute rollups, that is ten thousand minutes a deployment, some 300
million a scrape at 10,000 hosts. Instead, the hours are grouped into aligned blocks of
2**level hours (level 0 to TOP_LEVEL, counted from the epoch), and a block keeps, for every
deployment with a peak in it, each distinct peak and how many of its minutes had it: the
running requests an engine reports are whole numbers, so an hour holds a few dozen distinct
peaks and a week a few hundred. A window is then the few blocks that tile its whole hours
(`cover`: at most about fourteen for a week) and the minutes of its two partial hours; the two
values the percentile interpolates between are picked from their merged counts, and the
figure is the one `inventory.analytics.stats.percentile` gives over the whole list of minutes,
to the last bit.

A block's histograms count for readers only while its row in `inventory_running_block` is
complete. The rollup refresh deletes that row for every block holding a minute it rewrites (a
late batch: `invalidate`), in the transaction that rewrites it; `build` (beat, every minute)
builds the missing blocks of the last KEEP, an hour from its minutes once it is closed and
settled, a larger block from its two halves. A build says it is under way first, computes,
then marks the block complete only if the row it announced is still there, under the
refresh's lock: a refresh in between has deleted it, and the build is dropped. Where a block
is missing or incomplete, a reader takes its halves, down to the hour, and reads the minutes
of hours without one: slower, never different.
"""

from __future__ import annotations

import datetime as dt
import time

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from inventory.analytics.stats import interpolate_percentile, percentile_ranks
from inventory.timeseries import packing

# Blocks of up to 2**7 = 128 hours: a week's 168 hours are one of them and a few smaller.
TOP_LEVEL = 7
# Blocks are kept for the longest window read (the KV advice's week) and a day more.
KEEP = dt.timedelta(days=8)
# An hour is built this long after it ends: the flushes that straddle its end still refresh
# its last minute for a while (a later change only costs a rebuild).
SETTLE = dt.timedelta(minutes=5)
# pg_advisory_lock key of a build pass, arbitrary but fixed: "runblock" in ASCII. One pass at
# a time: a larger block is built from halves no other pass is rebuilding meanwhile.
BUILD_LOCK = 0x72756E626C6F636B
_HOUR = dt.timedelta(hours=1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def _index(moment: dt.datetime) -> int:
    """The hour since the epoch that `moment` falls in."""
    return (moment - _EPOCH) // _HOUR


def _at(index: int) -> dt.datetime:
    return _EPOCH + index * _HOUR


def cover(first: int, end: int) -> list[tuple[int, int]]:
    """The aligned blocks (level, first hour) that tile the hours [first, end), each as large
    as fits where it starts: at most 2 * TOP_LEVEL plus one a 128 hours."""
    blocks = []
    while first < end:
        level = TOP_LEVEL
        while first % (1 << level) or first + (1 << level) > end:
            level -= 1
        blocks.append((level, first))
        first += 1 << level
    return blocks


def _halves(level: int, first: int) -> tuple[tuple[int, int], tuple[int, int]]:
    half = 1 << (level - 1)
    return (level - 1, first), (level - 1, first + half)


INVALIDATE = """
DELETE FROM inventory_running_block b
WHERE EXISTS (
    SELECT FROM unnest(%s::timestamptz[]) AS h(hour)
    WHERE h.hour >= b.start AND h.hour < b.start + make_interval(hours => 1 << b.level)
)
"""


def invalidate(cursor, hours: list[dt.datetime]) -> None:
    """These hours' minute rollups are being rewritten (in the caller's transaction): every
    block holding one of them no longer counts."""
    if hours:
        cursor.execute(INVALIDATE, [hours])


# A block's histograms: each distinct peak (as the float a `real` column reaches Python as,
# through its text form) in ascending order, and the minutes that had it.
BUILD_HOUR = """
INSERT INTO inventory_running_histogram (level, start, deployment_id, peaks, minutes)
SELECT 0, %(start)s, deployment_id, array_agg(peak ORDER BY peak), array_agg(n ORDER BY peak)
FROM (
    SELECT deployment_id, running_max::text::float8 AS peak, count(*)::integer AS n
    FROM inventory_engine_rollups_1m(%(start)s, %(end)s)
    WHERE bucket >= %(start)s AND bucket < %(end)s AND running_max IS NOT NULL
    GROUP BY 1, 2
) peaks
GROUP BY deployment_id
"""
BUILD_FROM_HALVES = """
INSERT INTO inventory_running_histogram (level, start, deployment_id, peaks, minutes)
SELECT %(level)s, %(start)s, deployment_id, array_agg(peak ORDER BY peak),
    array_agg(n ORDER BY peak)
FROM (
    SELECT h.deployment_id, u.peak, sum(u.n)::integer AS n
    FROM inventory_running_histogram h, unnest(h.peaks, h.minutes) AS u(peak, n)
    WHERE h.level = %(half)s AND h.start IN (%(start)s, %(second)s)
    GROUP BY 1, 2
) peaks
GROUP BY deployment_id
"""
# Complete only if the announced row is still there (no refresh since) and, for a block
# built from its halves, both halves still are.
COMPLETE = """
UPDATE inventory_running_block SET complete = true
WHERE level = %(level)s AND start = %(start)s AND NOT complete
  AND (%(level)s = 0 OR (
      SELECT count(*) FROM inventory_running_block
      WHERE level = %(half)s AND start IN (%(start)s, %(second)s) AND complete) = 2)
"""


def _build(level: int, first: int) -> bool:
    start = _at(first)
    params = {
        "level": level,
        "start": start,
        "end": _at(first + (1 << level)),
        "half": level - 1,
        "second": _at(first + (1 << max(level - 1, 0))),
    }
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO inventory_running_block (level, start, complete) "
            "VALUES (%(level)s, %(start)s, false) "
            "ON CONFLICT (level, start) DO UPDATE SET complete = false",
            params,
        )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM inventory_running_histogram WHERE level = %(level)s AND start = %(start)s",
            params,
        )
        cursor.execute(BUILD_FROM_HALVES if level else BUILD_HOUR, params)
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [packing.REFRESH_LOCK])
        cursor.execute(COMPLETE, params)
        if cursor.rowcount:
            return True
        transaction.set_rollback(True)
        return False


def _complete(cursor, first: dt.datetime, end: dt.datetime) -> set[tuple[int, int]]:
    cursor.execute(
        "SELECT level, start FROM inventory_running_block "
        "WHERE complete AND start >= %s AND start < %s",
        [first, end],
    )
    return {(level, _index(start)) for level, start in cursor.fetchall()}


def build(budget_s: float = 45.0, now: dt.datetime | None = None) -> int:
    """Build the missing blocks of the last KEEP whose hours are settled, hours first and the
    newest first, until none is left or `budget_s` is spent; forget older blocks. Returns how
    many were built (none when another pass is running)."""
    now = now or timezone.now()
    deadline = time.monotonic() + budget_s
    first = _index(now - KEEP) + 1
    end = _index(now - SETTLE)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [BUILD_LOCK])
        if not cursor.fetchone()[0]:
            return 0
        try:
            for table in ("inventory_running_histogram", "inventory_running_block"):
                cursor.execute(f"DELETE FROM {table} WHERE start < %s", [_at(first)])
            return _build_missing(cursor, first, end, deadline)
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [BUILD_LOCK])


def _build_missing(cursor, first: int, end: int, deadline: float) -> int:
    complete = _complete(cursor, _at(first), _at(end))
    built = 0
    for level in range(TOP_LEVEL + 1):
        size = 1 << level
        last_start = (end - size) // size * size
        for start in range(last_start, first - 1, -size):
            if (level, start) in complete:
                continue
            if level and not all(half in complete for half in _halves(level, start)):
                continue
            if time.monotonic() > deadline:
                return built
            if _build(level, start):
                complete.add((level, start))
                built += 1
    return built


def _plan(
    first: int, end: int, complete: set[tuple[int, int]]
) -> tuple[list[tuple[int, int]], list[int]]:
    """The complete blocks that tile hours [first, end) where they can, and the hours left."""
    blocks, hours = [], []
    pending = cover(first, end)
    while pending:
        block = pending.pop()
        if block in complete:
            blocks.append(block)
        elif block[0] == 0:
            hours.append(block[1])
        else:
            pending.extend(_halves(*block))
    return blocks, sorted(hours)


def _spans(lo: dt.datetime, hi: dt.datetime, first: int, end: int, hours: list[int]):
    """The window [lo, hi)'s minutes outside the blocks: its partial hours at both ends and the
    hours without a complete block, adjacent ones joined."""
    spans = [[lo, _at(first)]]
    for hour in hours:
        if spans[-1][1] == _at(hour):
            spans[-1][1] = _at(hour + 1)
        else:
            spans.append([_at(hour), _at(hour + 1)])
    if spans[-1][1] == _at(end):
        spans[-1][1] = hi
    else:
        spans.append([_at(end), hi])
    return [(start, stop) for start, stop in spans if start < stop]


_BLOCK_ROWS = """
SELECT h.deployment_id, h.peaks, h.minutes
FROM inventory_running_histogram h
JOIN unnest(%(levels)s::smallint[], %(starts)s::timestamptz[]) AS c(level, start)
  ON h.level = c.level AND h.start = c.start
WHERE h.deployment_id = ANY(%(ids)s)
  AND EXISTS (SELECT FROM inventory_running_block b
              WHERE b.level = c.level AND b.start = c.start AND b.complete)
"""
# The blocks used, as the same statement sees them: one gone meanwhile is read again.
_STILL_COMPLETE = """
SELECT NULL::bigint, NULL::float8[], ARRAY[count(*)]::integer[]
FROM inventory_running_block b
JOIN unnest(%(levels)s::smallint[], %(starts)s::timestamptz[]) AS c(level, start)
  ON b.level = c.level AND b.start = c.start
WHERE b.complete
"""
_SPAN_ROWS = """
SELECT deployment_id, array_agg(running_max::text::float8), NULL::integer[]
FROM inventory_engine_rollups_1m(%(lo{i})s, %(hi{i})s)
WHERE deployment_id = ANY(%(ids)s) AND bucket >= %(lo{i})s AND bucket < %(hi{i})s
  AND running_max IS NOT NULL
GROUP BY deployment_id
"""


def running_percentile(
    deployment_ids: list[int], start: dt.datetime, end: dt.datetime, pct: int
) -> dict[int, float] | None:
    """`inventory.timeseries.queries.running_percentile` from the blocks where the window
    (start, end] holds complete ones; None where it holds none (the caller ranks the
    minutes)."""
    # (start, end] as [lo, hi): buckets are whole minutes, timestamps whole microseconds.
    lo, hi = start + _MICROSECOND, end + _MICROSECOND
    # Blocks only of hours whose minutes retention has not begun to drop.
    kept_from = timezone.now() - dt.timedelta(days=settings.TELEMETRY_1M_RETENTION_DAYS)
    first = _index(max(lo, kept_from) - _MICROSECOND) + 1
    end_hour = _index(hi)
    if first >= end_hour:
        return None
    for _attempt in range(3):
        with connection.cursor() as cursor:
            complete = _complete(cursor, _at(first), _at(end_hour))
            blocks, hours = _plan(first, end_hour, complete)
            if not blocks:
                return None
            spans = _spans(lo, hi, first, end_hour, hours)
            params = {
                "ids": list(deployment_ids),
                "levels": [level for level, _ in blocks],
                "starts": [_at(block_start) for _, block_start in blocks],
            }
            parts = [_BLOCK_ROWS, _STILL_COMPLETE]
            for i, (span_lo, span_hi) in enumerate(spans):
                parts.append(_SPAN_ROWS.format(i=i))
                params |= {f"lo{i}": span_lo, f"hi{i}": span_hi}
            cursor.execute(" UNION ALL ".join(f"({part})" for part in parts), params)
            rows = cursor.fetchall()
        still = [row for row in rows if row[0] is None]
        if still[0][2][0] == len(blocks):
            return _ranked([row for row in rows if row[0] is not None], pct)
    return None


def _ranked(rows: list[tuple], pct: int) -> dict[int, float]:
    """Per deployment, the percentile of its peaks given as (deployment, peaks, counts) rows,
    counts None for single minutes: the two ranked values picked from the merged counts."""
    if not rows:
        return {}
    owners, lengths, peaks, counts = [], [], [], []
    for deployment_id, values, minutes in rows:
        owners.append(deployment_id)
        lengths.append(len(values))
        peaks += values
        counts += minutes or [1] * len(values)
    owner = np.repeat(np.array(owners, dtype=np.int64), lengths)
    peak = np.array(peaks, dtype=np.float64)
    order = np.lexsort((peak, owner))
    owner, peak = owner[order], peak[order]
    # Minutes up to and including each entry, counted over every deployment in turn.
    through = np.cumsum(np.array(counts, dtype=np.int64)[order])
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    before = np.r_[0, through[starts[1:] - 1]].tolist()
    totals = (np.r_[through[starts[1:] - 1], through[-1]] - before).tolist()
    ranks = [percentile_ranks(total, pct) for total in totals]
    # The entry holding the minute of rank r (from 0) is the first counted past r.
    at = np.searchsorted(
        through,
        [base + rank for base, pair in zip(before, ranks, strict=True) for rank in pair],
        side="right",
    )
    values = peak[at].tolist()
    return {
        deployment_id: interpolate_percentile(total, pct, values[2 * i], values[2 * i + 1])
        for i, (deployment_id, total) in enumerate(zip(owner[starts].tolist(), totals, strict=True))
    }
