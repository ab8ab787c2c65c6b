"""The 1-minute and 1-hour rollups, recomputed for the minutes ingest marked dirty.

Each refresh takes the oldest dirty minutes, recomputes those minutes' 1-minute rows from the
raw samples and then the 1-hour rows of the hours they fall in from their 1-minute rows,
replacing what was there. Recomputing rather than adding makes a refresh idempotent and late
data harmless: a minute that receives another batch is dirty again and comes out right. Every
figure keeps its peak (max of the interval maxima) beside sums and counts for means; a sum of
floating-point figures adds them in time order, so that it comes out the same to the last bit
however the rows lie on disk (as rows or packed). Refreshes
run one at a time (a transaction advisory lock): two refreshers rebuilding the same hour would
otherwise race on its rows.

Beside the hour rows, each hour's minutes that the host page's analyses read are packed in one
row (`PACK_OF_MEMORY`, `PACK_OF_ENGINES`), recomputed from the same minute rows in the same
step: a week of a shared host is then a few thousand rows to read, not a few hundred thousand.
A pack holds the minutes in time order as big-endian 8-byte arrays, one `bytea` a figure
(decoded by `inventory.timeseries.queries`): the minute's start in epoch microseconds and its
figure, a missing figure as NaN (ingest refuses non-finite figures, so a NaN is never data).
A `real` figure goes through its text form, as a `real` column reaches Python, so that a packed
figure is the very float the minute row gives.
"""

from __future__ import annotations

import datetime as dt

from django.db import connection, transaction

from inventory.timeseries import packing

MINUTE_OF_CARDS = """
INSERT INTO inventory_card_rollup_1m (gpu_id, bucket, samples, lost, total_bytes, used_max,
    used_sum, used_count, reserved_max, free_min, util_gpu_max, util_gpu_sum, util_gpu_count,
    frag_index_max)
SELECT gpu_id, date_trunc('minute', ts, 'UTC'), count(*), bool_or(lost), max(total_bytes),
    max(used_max), coalesce(sum(used_last), 0), count(used_last), max(reserved_last),
    min(free_min), max(util_gpu_max), coalesce(sum(util_gpu_last), 0), count(util_gpu_last),
    max(frag_index_max)
FROM inventory_card_samples(%(first)s, %(last)s)
WHERE ts >= %(first)s AND ts < %(last)s AND date_trunc('minute', ts, 'UTC') = ANY(%(minutes)s)
GROUP BY 1, 2
"""
MINUTE_OF_PROCESSES = """
INSERT INTO inventory_process_rollup_1m (gpu_id, pid, bucket, deployment_id, name, samples,
    used_max, used_sum, used_count, frag_index_max)
SELECT gpu_id, pid, date_trunc('minute', ts, 'UTC'), max(deployment_id), max(name), count(*),
    max(used_max), coalesce(sum(used_last), 0), count(used_last), max(frag_index_max)
FROM inventory_process_samples(%(first)s, %(last)s)
WHERE ts >= %(first)s AND ts < %(last)s AND date_trunc('minute', ts, 'UTC') = ANY(%(minutes)s)
GROUP BY 1, 2, 3
"""
MINUTE_OF_ENGINES = """
INSERT INTO inventory_engine_rollup_1m (deployment_id, bucket, samples, running_max,
    running_sum, running_count, waiting_max, kv_usage_max, requests, requests_s,
    latency_p50_max, latency_p95_max, latency_p99_max)
SELECT deployment_id, date_trunc('minute', ts, 'UTC'), count(*), max(running_max),
    coalesce(sum(running_last ORDER BY ts, batch_id), 0), count(running_last), max(waiting_max),
    max(kv_usage_max), coalesce(sum(requests ORDER BY ts, batch_id), 0),
    coalesce(sum(requests_window_s ORDER BY ts, batch_id), 0), max(latency_p50_s),
    max(latency_p95_s), max(latency_p99_s)
FROM inventory_engine_samples(%(first)s, %(last)s)
WHERE ts >= %(first)s AND ts < %(last)s AND date_trunc('minute', ts, 'UTC') = ANY(%(minutes)s)
GROUP BY 1, 2
"""
HOUR_OF_CARDS = """
INSERT INTO inventory_card_rollup_1h (gpu_id, bucket, samples, lost, total_bytes, used_max,
    used_sum, used_count, reserved_max, free_min, util_gpu_max, util_gpu_sum, util_gpu_count,
    frag_index_max)
SELECT gpu_id, date_trunc('hour', bucket, 'UTC'), sum(samples), bool_or(lost),
    max(total_bytes), max(used_max), sum(used_sum), sum(used_count), max(reserved_max),
    min(free_min), max(util_gpu_max), sum(util_gpu_sum), sum(util_gpu_count),
    max(frag_index_max)
FROM inventory_card_rollups_1m(%(first)s, %(last)s)
WHERE bucket >= %(first)s AND bucket < %(last)s
  AND date_trunc('hour', bucket, 'UTC') = ANY(%(hours)s)
GROUP BY 1, 2
"""
HOUR_OF_PROCESSES = """
INSERT INTO inventory_process_rollup_1h (gpu_id, pid, bucket, deployment_id, name, samples,
    used_max, used_sum, used_count, frag_index_max)
SELECT gpu_id, pid, date_trunc('hour', bucket, 'UTC'), max(deployment_id), max(name),
    sum(samples), max(used_max), sum(used_sum), sum(used_count), max(frag_index_max)
FROM inventory_process_rollups_1m(%(first)s, %(last)s)
WHERE bucket >= %(first)s AND bucket < %(last)s
  AND date_trunc('hour', bucket, 'UTC') = ANY(%(hours)s)
GROUP BY 1, 2, 3
"""
HOUR_OF_ENGINES = """
INSERT INTO inventory_engine_rollup_1h (deployment_id, bucket, samples, running_max,
    running_sum, running_count, waiting_max, kv_usage_max, requests, requests_s,
    latency_p50_max, latency_p95_max, latency_p99_max)
SELECT deployment_id, date_trunc('hour', bucket, 'UTC'), sum(samples), max(running_max),
    sum(running_sum ORDER BY bucket), sum(running_count), max(waiting_max), max(kv_usage_max),
    sum(requests ORDER BY bucket), sum(requests_s ORDER BY bucket), max(latency_p50_max),
    max(latency_p95_max), max(latency_p99_max)
FROM inventory_engine_rollups_1m(%(first)s, %(last)s)
WHERE bucket >= %(first)s AND bucket < %(last)s
  AND date_trunc('hour', bucket, 'UTC') = ANY(%(hours)s)
GROUP BY 1, 2
"""

PACK_OF_MEMORY = """
INSERT INTO inventory_memory_minutes_1h (gpu_id, deployment_id, bucket, minutes, at_us,
    used_max)
SELECT gpu_id, deployment_id, date_trunc('hour', bucket, 'UTC'), count(*),
    string_agg(int8send((extract(epoch FROM bucket) * 1000000)::bigint), ''::bytea
               ORDER BY bucket),
    string_agg(int8send(used_max), ''::bytea ORDER BY bucket)
FROM (
    -- By deployment, not PID: the highest any of its processes on the card held that minute.
    SELECT gpu_id, deployment_id, bucket, max(used_max) AS used_max
    FROM inventory_process_rollups_1m(%(first)s, %(last)s)
    WHERE bucket >= %(first)s AND bucket < %(last)s
      AND date_trunc('hour', bucket, 'UTC') = ANY(%(hours)s)
      AND deployment_id IS NOT NULL AND used_max IS NOT NULL
    GROUP BY 1, 2, 3
) minutes
GROUP BY 1, 2, 3
"""
PACK_OF_ENGINES = """
INSERT INTO inventory_engine_minutes_1h (deployment_id, bucket, minutes, at_us, running_max,
    latency_p99_max)
SELECT deployment_id, date_trunc('hour', bucket, 'UTC'), count(*),
    string_agg(int8send((extract(epoch FROM bucket) * 1000000)::bigint), ''::bytea
               ORDER BY bucket),
    string_agg(float8send(coalesce(running_max::text::float8, 'NaN')), ''::bytea
               ORDER BY bucket),
    string_agg(float8send(coalesce(latency_p99_max::text::float8, 'NaN')), ''::bytea
               ORDER BY bucket)
FROM inventory_engine_rollups_1m(%(first)s, %(last)s)
WHERE bucket >= %(first)s AND bucket < %(last)s
  AND date_trunc('hour', bucket, 'UTC') = ANY(%(hours)s)
GROUP BY 1, 2
"""
_PACKS = (
    ("inventory_memory_minutes_1h", PACK_OF_MEMORY),
    ("inventory_engine_minutes_1h", PACK_OF_ENGINES),
)

WITH_SAMPLES = " UNION ".join(
    f"SELECT DISTINCT date_trunc('minute', ts, 'UTC') FROM {table}(%(first)s, %(last)s) "
    "WHERE ts >= %(first)s AND ts < %(last)s AND date_trunc('minute', ts, 'UTC') = ANY(%(minutes)s)"
    for table in ("inventory_card_samples", "inventory_process_samples", "inventory_engine_samples")
)

_KINDS = (
    ("card", MINUTE_OF_CARDS, HOUR_OF_CARDS),
    ("process", MINUTE_OF_PROCESSES, HOUR_OF_PROCESSES),
    ("engine", MINUTE_OF_ENGINES, HOUR_OF_ENGINES),
)
# How many dirty minutes one refresh takes: a backlog (a long backfill) goes in pieces.
MINUTES_PER_REFRESH = 240
REFRESH_LOCK = packing.REFRESH_LOCK


def _hour(moment: dt.datetime) -> dt.datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


@transaction.atomic
def refresh(limit: int = MINUTES_PER_REFRESH) -> int:
    """Recompute the rollups of up to `limit` dirty minutes; return how many were refreshed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [REFRESH_LOCK])
        cursor.execute(
            "SELECT bucket FROM inventory_rollup_dirty ORDER BY bucket LIMIT %s FOR UPDATE",
            [limit],
        )
        dirty = [row[0] for row in cursor.fetchall()]
        if not dirty:
            return 0
        # A minute whose raw samples are gone (aged out with their partition) cannot be
        # recomputed: keep its rollups as they are.
        span = {"minutes": dirty, "first": dirty[0], "last": dirty[-1] + dt.timedelta(minutes=1)}
        cursor.execute(WITH_SAMPLES, span)
        minutes = sorted(row[0] for row in cursor.fetchall())
        if not minutes:
            cursor.execute("DELETE FROM inventory_rollup_dirty WHERE bucket = ANY(%s)", [dirty])
            return len(dirty)
        hours = sorted({_hour(minute) for minute in minutes})
        by_minute = {
            "minutes": minutes,
            "first": minutes[0],
            "last": minutes[-1] + dt.timedelta(minutes=1),
        }
        by_hour = {"hours": hours, "first": hours[0], "last": hours[-1] + dt.timedelta(hours=1)}
        # A late minute of an hour already packed: its minute rows are rewritten below.
        packing.unpack_hours(cursor, packing.MINUTE_TABLES, hours)
        packing.mark_due(cursor, hours)
        for kind, minute_sql, hour_sql in _KINDS:
            cursor.execute(
                f"DELETE FROM inventory_{kind}_rollup_1m WHERE bucket = ANY(%s)", [minutes]
            )
            cursor.execute(minute_sql, by_minute)
            cursor.execute(
                f"DELETE FROM inventory_{kind}_rollup_1h WHERE bucket = ANY(%s)", [hours]
            )
            cursor.execute(hour_sql, by_hour)
        _pack(cursor, by_hour)
        cursor.execute("DELETE FROM inventory_rollup_dirty WHERE bucket = ANY(%s)", [dirty])
    return len(dirty)


def _pack(cursor, by_hour: dict) -> None:
    for table, pack_sql in _PACKS:
        cursor.execute(f"DELETE FROM {table} WHERE bucket = ANY(%s)", [by_hour["hours"]])
        cursor.execute(pack_sql, by_hour)


@transaction.atomic
def pack_hours(start: dt.datetime, end: dt.datetime) -> None:
    """Pack again every hour that [start, end] touches, from the minute rollups as they are:
    for minute rollups written other than through a refresh (the benchmark's generated
    history, tests that write minutes straight)."""
    hours = []
    hour = _hour(start.astimezone(dt.UTC))
    while hour <= end:
        hours.append(hour)
        hour += dt.timedelta(hours=1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [REFRESH_LOCK])
        _pack(cursor, {"hours": hours, "first": hours[0], "last": hour})


def refresh_all() -> int:
    """Refresh until nothing is dirty (tests, backfills, the benchmark)."""
    total = 0
    while refreshed := refresh():
        total += refreshed
    return total
