"""The 1-minute and 1-hour rollups, recomputed for the minutes ingest marked dirty.

Each refresh takes dirty minutes (the newest hours first, an hour's minutes in time order) and
brings those minutes' 1-minute rows up to date, written over what was there in place (the
minute being filled, refreshed again every cycle, is rewritten on its own pages: HOT updates,
no index entry). A dirty mark names its minute, the host whose batch wrote there (or every
host: `EVERY_HOST`) and that batch (or none: a tool's mark, or one written before marks named
batches); a minute marked by a few hosts (a late batch, an agent's backlog) is refreshed for
those hosts' cards and deployments alone, not for the fleet. Where every mark of a minute names
its batch, the samples of those batches alone are folded into its card and process rows (their
figures are integer sums, maxima, minima and ors: a row merged with a batch's figures is the
row a recompute of all the minute's samples gives), so the minute being filled reads the
flushes since the last cycle, not the whole minute again; an engine minute, whose float sums
are summed in time order, and a minute marked without a batch are recomputed from their raw
samples, which is idempotent. Marks are never merged, and a refresh deletes only the marks it
read: a batch that commits while a refresh runs leaves its own mark for the next, and a
recompute leaves out its samples (`OF_READ`), which that next refresh folds in once. Every
figure keeps its peak (max of the interval maxima) beside sums and counts for means; a sum of
floating-point figures adds them in time order, so that it comes out the same to the last bit
however the rows lie on disk (as rows or packed). Refreshes run one at a time (a transaction
advisory lock): two refreshers rebuilding the same hour would otherwise race on its rows. A
late minute of an hour whose minute rows are packed (inventory.timeseries.packing) has that
hour unpacked first; the refreshed hours are marked due for packing.

Beside the hour rows, each hour's minutes that the host page's analyses read are packed in one
row (`PACK_OF_MEMORY`, `PACK_OF_ENGINES`): a week of a shared host is then a few thousand rows
to read, not a few hundred thousand. A pack holds the minutes in time order as big-endian
8-byte arrays, one `bytea` a figure (decoded by `inventory.timeseries.queries`): the minute's
start in epoch microseconds and its figure, a missing figure as NaN (ingest refuses non-finite
figures, so a NaN is never data). A `real` figure goes through its text form, as a `real`
column reaches Python, so that a packed figure is the very float the minute row gives.

The hour rows and packs are folded, not recomputed, where that gives the very same rows: an
hour that `inventory_rollup_hour_folded` says is the fold of its minutes up to `last_minute`
takes minutes from `last_minute` on (new minutes, or that last minute again: the minute being
filled, re-dirtied by every flush) into its rows (`FOLD_OF_*`: the minutes' old rows come off
the sums, their new rows go in, or where the minutes took batches folded in, those batches'
figures go in; maxima, minima and `lost` merge, since a minute's raw samples only grow)
and into its packs (`APPEND_TO_*`, the last minute's old entry replaced).
A minute before `last_minute` (a late batch: an agent's backlog after a cut) folds into the
hour rows the same way, its sums being integers; its packs cannot take it at their end, so the
packs whose entry for that minute changed (`CHANGED_*`: one host's, for one host's backlog)
are made again from their minute rows up to `last_minute` (`SPLICE_*`), the rest are left as
they are. Anything else is recomputed whole from the hour's minute rows (`HOUR_OF_*`,
`PACK_OF_*`): an hour without that row (the first of its minutes, or one written other than by
a refresh), or a minute whose new row does not hold its old one (raw samples gone and come
back). The engine hour rows' sums are floating point, summed in time order (an
order-dependent sum, a left fold): minutes from a row's last on fold onto its sums before its
last minute, which the row keeps (`FOLD_OF_ENGINES`), to the same last bit; an hour with a late
minute has them recomputed from its minutes in time order (for a few hosts' minutes, only those
hosts' deployments).
"""

from __future__ import annotations

import datetime as dt
import re

from django.conf import settings
from django.db import connection, transaction

from inventory.timeseries import packing, running_blocks

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
  {of_hosts}{of_batches}
GROUP BY 1, 2
"""
MINUTE_OF_PROCESSES = """
INSERT INTO inventory_process_rollup_1m (gpu_id, pid, bucket, deployment_id, name, samples,
    used_max, used_sum, used_count, frag_index_max)
SELECT gpu_id, pid, date_trunc('minute', ts, 'UTC'), max(deployment_id), max(name), count(*),
    max(used_max), coalesce(sum(used_last), 0), count(used_last), max(frag_index_max)
FROM inventory_process_samples(%(first)s, %(last)s)
WHERE ts >= %(first)s AND ts < %(last)s AND date_trunc('minute', ts, 'UTC') = ANY(%(minutes)s)
  {of_hosts}{of_batches}
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
  {of_hosts}{of_batches}
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
# An engine hour row also keeps its deployment's last minute in the hour and its float sums
# over the minutes before that one (`*_before`): what `FOLD_OF_ENGINES` folds the minute
# being filled into.
_ENGINE_HOUR_COLUMNS = """deployment_id, bucket, samples, running_max, running_sum,
    running_count, waiting_max, kv_usage_max, requests, requests_s, latency_p50_max,
    latency_p95_max, latency_p99_max, last_bucket, running_sum_before, requests_before,
    requests_s_before"""
_ENGINE_HOUR_FIGURES = """deployment_id, hour, sum(samples), max(running_max),
    sum(running_sum ORDER BY bucket), sum(running_count), max(waiting_max), max(kv_usage_max),
    sum(requests ORDER BY bucket), sum(requests_s ORDER BY bucket), max(latency_p50_max),
    max(latency_p95_max), max(latency_p99_max), max(at),
    sum(running_sum ORDER BY bucket) FILTER (WHERE bucket < own_last),
    sum(requests ORDER BY bucket) FILTER (WHERE bucket < own_last),
    sum(requests_s ORDER BY bucket) FILTER (WHERE bucket < own_last)"""
_ENGINE_MINUTE_FIGURES = """samples, running_max, running_sum, running_count, waiting_max,
    kv_usage_max, requests, requests_s, latency_p50_max, latency_p95_max, latency_p99_max"""
HOUR_OF_ENGINES = f"""
INSERT INTO inventory_engine_rollup_1h ({_ENGINE_HOUR_COLUMNS})
SELECT {_ENGINE_HOUR_FIGURES}
FROM (
    SELECT deployment_id, date_trunc('hour', bucket, 'UTC') AS hour, bucket,
        {_ENGINE_MINUTE_FIGURES}, bucket AS at,
        max(bucket) OVER (PARTITION BY deployment_id, date_trunc('hour', bucket, 'UTC'))
            AS own_last
    FROM inventory_engine_rollups_1m(%(first)s, %(last)s)
    WHERE bucket >= %(first)s AND bucket < %(last)s
      AND date_trunc('hour', bucket, 'UTC') = ANY(%(hours)s){{of_refreshed}}
) minutes
GROUP BY 1, 2
"""
# The deployments of the hosts a refresh of a few hosts' minutes rewrote: the only ones whose
# engine hour rows it changes.
OF_REFRESHED = " AND deployment_id = ANY(%(deployments)s::bigint[])"

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

# What a refresh keeps of the minutes it refreshes, for the hours it folds them into: the rows
# the minutes held before (`_old`) and the rows they hold now (`_new`), and where batches were
# folded into them, those batches' own figures a minute (`_batches`), each kind in a temporary
# table shaped like its minute rollups, emptied at the start of every refresh.
HELD = "refreshed_{kind}_{age}"
AGES = ("old", "new", "batches")

# The hour rows of the minutes folded in: the refreshed minutes' new rows go in, their old rows
# come off the sums (`CHANGES`). The new row of a minute holds its old one (checked by
# `NOT_HELD`), so its maxima, minima and `lost` need no old row to come off: they merge with
# the hour's. Where every minute of a kind took batches folded in (`FOLDED_MINUTES`), a new
# row is its old row merged with those batches' figures, so the batches' figures alone are
# what the hour takes (`BATCHES`): half the rows, none to take off.
FOLD_OF_CARDS = """
INSERT INTO inventory_card_rollup_1h AS h (gpu_id, bucket, samples, lost, total_bytes,
    used_max, used_sum, used_count, reserved_max, free_min, util_gpu_max, util_gpu_sum,
    util_gpu_count, frag_index_max)
SELECT gpu_id, date_trunc('hour', bucket, 'UTC'), sum(samples), bool_or(lost),
    max(total_bytes), max(used_max), sum(used_sum), sum(used_count), max(reserved_max),
    min(free_min), max(util_gpu_max), sum(util_gpu_sum), sum(util_gpu_count),
    max(frag_index_max)
FROM {minutes}
WHERE date_trunc('hour', bucket, 'UTC') = ANY(%(hours)s)
GROUP BY 1, 2
ON CONFLICT (gpu_id, bucket) DO UPDATE SET
"""
FOLD_OF_PROCESSES = """
INSERT INTO inventory_process_rollup_1h AS h (gpu_id, pid, bucket, deployment_id, name,
    samples, used_max, used_sum, used_count, frag_index_max)
SELECT gpu_id, pid, date_trunc('hour', bucket, 'UTC'), max(deployment_id), max(name),
    sum(samples), max(used_max), sum(used_sum), sum(used_count), max(frag_index_max)
FROM {minutes}
WHERE date_trunc('hour', bucket, 'UTC') = ANY(%(hours)s)
GROUP BY 1, 2, 3
ON CONFLICT (gpu_id, pid, bucket) DO UPDATE SET
"""
# What each kind's hour fold takes: the refreshed minutes' changes (new rows, old rows taken
# off), or the batches folded into them.
CHANGES = {
    "card": """(
    SELECT * FROM refreshed_card_new
    UNION ALL
    SELECT gpu_id, bucket, -samples, false, NULL, NULL, -used_sum, -used_count, NULL, NULL,
        NULL, -util_gpu_sum, -util_gpu_count, NULL
    FROM refreshed_card_old
) minutes""",
    "process": """(
    SELECT * FROM refreshed_process_new
    UNION ALL
    SELECT gpu_id, pid, bucket, NULL, NULL, -samples, NULL, -used_sum, -used_count, NULL
    FROM refreshed_process_old
) minutes""",
}
BATCHES = "refreshed_{kind}_batches minutes"
# The engine hour rows of the deployments refreshed, folded: each folds its refreshed minutes'
# new rows, in time order, into its hour row's sums before its last minute where that minute
# was refreshed again (the minute being filled), else into its whole sums; the old rows'
# counts come off. A float sum in time order is a left fold, so this is the very sum a
# recompute from every minute gives. Only for minutes from the hour's last on (a late minute's
# hour has its engine rows recomputed).
FOLD_OF_ENGINES = f"""
INSERT INTO inventory_engine_rollup_1h AS h ({_ENGINE_HOUR_COLUMNS})
SELECT {_ENGINE_HOUR_FIGURES}
FROM (
    SELECT *, max(at) OVER (PARTITION BY deployment_id, hour) AS own_last FROM (
        SELECT deployment_id, bucket AS hour, '-infinity'::timestamptz AS bucket, samples,
            running_max,
            CASE WHEN again THEN running_sum_before ELSE running_sum END AS running_sum,
            running_count, waiting_max, kv_usage_max,
            CASE WHEN again THEN requests_before ELSE requests END AS requests,
            CASE WHEN again THEN requests_s_before ELSE requests_s END AS requests_s,
            latency_p50_max, latency_p95_max, latency_p99_max,
            CASE WHEN again THEN NULL ELSE last_bucket END AS at
        FROM (
            SELECT h.*, EXISTS (SELECT 1 FROM refreshed_engine_old o
                                WHERE o.deployment_id = h.deployment_id
                                  AND o.bucket = h.last_bucket) AS again
            FROM inventory_engine_rollup_1h h
            WHERE h.bucket = ANY(%(hours)s) AND (h.deployment_id, h.bucket) IN (
                SELECT deployment_id, date_trunc('hour', bucket, 'UTC')
                FROM refreshed_engine_new
                UNION SELECT deployment_id, date_trunc('hour', bucket, 'UTC')
                FROM refreshed_engine_old)
        ) hour_row
        UNION ALL
        SELECT deployment_id, date_trunc('hour', bucket, 'UTC'), bucket, -samples, NULL, NULL,
            -running_count, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM refreshed_engine_old
        UNION ALL
        SELECT deployment_id, date_trunc('hour', bucket, 'UTC'), bucket,
            {_ENGINE_MINUTE_FIGURES}, bucket
        FROM refreshed_engine_new
    ) folded
    WHERE hour = ANY(%(hours)s)
) minutes
GROUP BY 1, 2
ON CONFLICT (deployment_id, bucket) DO UPDATE SET
"""
# Each kind's minute row key.
_KEYS = {
    "card": ("gpu_id", "bucket"),
    "process": ("gpu_id", "pid", "bucket"),
    "engine": ("deployment_id", "bucket"),
}
# How each kind's figures merge: (key, sums, maxima, minima, ors).
_MERGES = {
    "card": (
        _KEYS["card"],
        ("samples", "used_sum", "used_count", "util_gpu_sum", "util_gpu_count"),
        ("total_bytes", "used_max", "reserved_max", "util_gpu_max", "frag_index_max"),
        ("free_min",),
        ("lost",),
    ),
    "process": (
        _KEYS["process"],
        ("samples", "used_sum", "used_count"),
        ("deployment_id", "name", "used_max", "frag_index_max"),
        (),
        (),
    ),
    "engine": (
        _KEYS["engine"],
        ("samples", "running_count"),
        (
            "running_max",
            "waiting_max",
            "kv_usage_max",
            "latency_p50_max",
            "latency_p95_max",
            "latency_p99_max",
        ),
        (),
        (),
    ),
}


def _merged(kind: str) -> str:
    """The ON CONFLICT assignments that merge a fold's row into the hour row it meets."""
    _key, sums, maxima, minima, ors = _MERGES[kind]
    return ", ".join(
        [f"{c} = h.{c} + excluded.{c}" for c in sums]
        + [f"{c} = greatest(h.{c}, excluded.{c})" for c in maxima]
        + [f"{c} = least(h.{c}, excluded.{c})" for c in minima]
        + [f"{c} = h.{c} OR excluded.{c}" for c in ors]
    )


def _not_held(kind: str) -> str:
    """The hours where a refreshed minute's new row does not hold its old row (an old row
    gone, a maximum lower, a minimum higher, `lost` cleared): those cannot be folded."""
    key, _sums, maxima, minima, ors = _MERGES[kind]
    lost = (
        ["n.bucket IS NULL"]
        + [f"greatest(o.{c}, n.{c}) IS DISTINCT FROM n.{c}" for c in maxima]
        + [f"least(o.{c}, n.{c}) IS DISTINCT FROM n.{c}" for c in minima]
        + [f"(o.{c} AND NOT n.{c})" for c in ors]
    )
    joined = " AND ".join(f"n.{c} = o.{c}" for c in key)
    return (
        f"SELECT DISTINCT date_trunc('hour', o.bucket, 'UTC') FROM refreshed_{kind}_old o "
        f"LEFT JOIN refreshed_{kind}_new n ON {joined} WHERE {' OR '.join(lost)}"
    )


_FOLDS = (
    ("card", FOLD_OF_CARDS + _merged("card")),
    ("process", FOLD_OF_PROCESSES + _merged("process")),
)
ENGINE_FOLD = FOLD_OF_ENGINES + ", ".join(
    f"{c} = excluded.{c}"
    for c in (c.strip() for c in _ENGINE_HOUR_COLUMNS.split(","))
    if c not in _KEYS["engine"]
)

# A folded hour's packs take the refreshed minutes from its last minute on at their end
# (`APPEND_TO_*`), the entry of the hour's last minute coming off first where that minute is
# refreshed again: in the same write where the pack's last entry is the first of those it is
# given; by `STRIP_LAST` where the minute no longer has an entry for the pack (its deployment
# changed, say).
STRIP_LAST = """
UPDATE {table} p SET minutes = p.minutes - 1, {strip}
FROM ({lost}) lost
WHERE p.bucket = lost.hour AND {matched}
  AND substring(p.at_us FROM octet_length(p.at_us) - 7)
      = int8send((extract(epoch FROM lost.last) * 1000000)::bigint)
RETURNING p.minutes
"""
APPEND_TO_MEMORY = """
INSERT INTO inventory_memory_minutes_1h AS p (gpu_id, deployment_id, bucket, minutes, at_us,
    used_max)
SELECT gpu_id, deployment_id, date_trunc('hour', bucket, 'UTC'), count(*),
    string_agg(int8send((extract(epoch FROM bucket) * 1000000)::bigint), ''::bytea
               ORDER BY bucket),
    string_agg(int8send(used_max), ''::bytea ORDER BY bucket)
FROM (
    SELECT gpu_id, deployment_id, bucket, max(used_max) AS used_max
    FROM refreshed_process_new
    JOIN unnest(%(hours)s::timestamptz[], %(lasts)s::timestamptz[]) folded (hour, last)
      ON date_trunc('hour', bucket, 'UTC') = folded.hour AND bucket >= folded.last
    WHERE deployment_id IS NOT NULL AND used_max IS NOT NULL
    GROUP BY 1, 2, 3
) minutes
GROUP BY 1, 2, 3
ON CONFLICT (gpu_id, bucket, deployment_id) DO UPDATE SET
"""
APPEND_TO_ENGINES = """
INSERT INTO inventory_engine_minutes_1h AS p (deployment_id, bucket, minutes, at_us,
    running_max, latency_p99_max)
SELECT deployment_id, date_trunc('hour', bucket, 'UTC'), count(*),
    string_agg(int8send((extract(epoch FROM bucket) * 1000000)::bigint), ''::bytea
               ORDER BY bucket),
    string_agg(float8send(coalesce(running_max::text::float8, 'NaN')), ''::bytea
               ORDER BY bucket),
    string_agg(float8send(coalesce(latency_p99_max::text::float8, 'NaN')), ''::bytea
               ORDER BY bucket)
FROM refreshed_engine_new
JOIN unnest(%(hours)s::timestamptz[], %(lasts)s::timestamptz[]) folded (hour, last)
  ON date_trunc('hour', bucket, 'UTC') = folded.hour AND bucket >= folded.last
GROUP BY 1, 2
ON CONFLICT (deployment_id, bucket) DO UPDATE SET
"""
# The pack's last entry is the minute refreshed again: the first the append brings.
_AGAIN = "substring(p.at_us FROM octet_length(p.at_us) - 7) = substring(excluded.at_us FOR 8)"


def _appended(columns: tuple[str, ...]) -> str:
    """The ON CONFLICT assignments that append a fold's entries to the pack they meet."""
    return ", ".join(
        [f"minutes = p.minutes + excluded.minutes - CASE WHEN {_AGAIN} THEN 1 ELSE 0 END"]
        + [
            f"{c} = CASE WHEN {_AGAIN} THEN substring(p.{c} FOR octet_length(p.{c}) - 8) "
            f"ELSE p.{c} END || excluded.{c}"
            for c in columns
        ]
    )


def _stripped(columns: tuple[str, ...]) -> str:
    return ", ".join(f"{c} = substring(p.{c} FOR octet_length(p.{c}) - 8)" for c in columns)


_MEMORY = ("at_us", "used_max")
_ENGINES = ("at_us", "running_max", "latency_p99_max")
# The packs that had an entry for their hour's last minute among the refreshed minutes' old
# rows and have none among the new ones (the packs of the hosts not refreshed, a late
# batch's minute, have neither): found in the refreshed rows alone, so that a refresh where
# none lost one (nearly every refresh) reads no pack for it.
LOST_AT_LAST = """
SELECT DISTINCT {key}, folded.hour, folded.last FROM refreshed_{kind}_old n
JOIN unnest(%(hours)s::timestamptz[], %(lasts)s::timestamptz[]) folded (hour, last)
  ON n.bucket = folded.last
WHERE {entry}
EXCEPT
SELECT {key}, folded.hour, folded.last FROM refreshed_{kind}_new n
JOIN unnest(%(hours)s::timestamptz[], %(lasts)s::timestamptz[]) folded (hour, last)
  ON n.bucket = folded.last
WHERE {entry}
"""


def _lost_at_last(kind: str, key: tuple[str, ...], entry: str) -> tuple[str, str]:
    """What finds the packs that lose their last entry, and how a pack meets its row there."""
    lost = LOST_AT_LAST.format(key=", ".join(key), kind=kind, entry=entry)
    return lost, " AND ".join(f"p.{c} = lost.{c}" for c in key)


# Each pack: its table, its bytea columns, its append, and the packs that lose their last
# entry (with how a pack meets them).
_APPENDS = (
    ("inventory_memory_minutes_1h", _MEMORY, APPEND_TO_MEMORY + _appended(_MEMORY),
     _lost_at_last("process", ("gpu_id", "deployment_id"),
                   "n.deployment_id IS NOT NULL AND n.used_max IS NOT NULL")),
    ("inventory_engine_minutes_1h", _ENGINES, APPEND_TO_ENGINES + _appended(_ENGINES),
     _lost_at_last("engine", ("deployment_id",), "true")),
)  # fmt: skip

# The packs of a folded hour whose entry for a late minute (one before the hour's last) is not
# what it was: an entry came, went or changed its figure (compared as the bytes it is packed
# as). Each is made again from its minute rows up to the hour's last minute (`SPLICE_*`, read
# from the row table: a refresh unpacks its hours first); the minutes after that are appended.
LATE = """
JOIN unnest(%(hours)s::timestamptz[], %(lasts)s::timestamptz[]) folded (hour, last)
  ON date_trunc('hour', bucket, 'UTC') = folded.hour AND bucket < folded.last
"""
_MEMORY_ENTRIES = """
    SELECT gpu_id, deployment_id, bucket, max(used_max) AS used_max FROM {held}
    WHERE deployment_id IS NOT NULL AND used_max IS NOT NULL GROUP BY 1, 2, 3
"""
CHANGED_MEMORY = f"""
INSERT INTO refreshed_memory_keys
SELECT DISTINCT gpu_id, deployment_id, folded.hour, folded.last
FROM ({_MEMORY_ENTRIES.format(held="refreshed_process_old")}) o
FULL JOIN ({_MEMORY_ENTRIES.format(held="refreshed_process_new")}) n
  USING (gpu_id, deployment_id, bucket)
{LATE}
WHERE o.used_max IS DISTINCT FROM n.used_max
"""
_ENGINE_ENTRY = (
    "(float8send(coalesce({row}.running_max::text::float8, 'NaN'))"
    " || float8send(coalesce({row}.latency_p99_max::text::float8, 'NaN')))"
)
CHANGED_ENGINES = f"""
INSERT INTO refreshed_engine_keys
SELECT DISTINCT deployment_id, folded.hour, folded.last
FROM refreshed_engine_old o FULL JOIN refreshed_engine_new n USING (deployment_id, bucket)
{LATE}
WHERE o.bucket IS NULL OR n.bucket IS NULL
   OR {_ENGINE_ENTRY.format(row="o")} <> {_ENGINE_ENTRY.format(row="n")}
"""
SPLICE_MEMORY = """
INSERT INTO inventory_memory_minutes_1h (gpu_id, deployment_id, bucket, minutes, at_us,
    used_max)
SELECT gpu_id, deployment_id, hour, count(*),
    string_agg(int8send((extract(epoch FROM bucket) * 1000000)::bigint), ''::bytea
               ORDER BY bucket),
    string_agg(int8send(used_max), ''::bytea ORDER BY bucket)
FROM (
    SELECT k.gpu_id, k.deployment_id, k.hour, r.bucket, max(r.used_max) AS used_max
    FROM refreshed_memory_keys k
    JOIN inventory_process_rollup_1m r ON r.deployment_id = k.deployment_id
     AND r.gpu_id = k.gpu_id AND r.bucket >= k.hour AND r.bucket <= k.last
    WHERE r.used_max IS NOT NULL
    GROUP BY 1, 2, 3, 4
) minutes
GROUP BY 1, 2, 3
"""
SPLICE_ENGINES = """
INSERT INTO inventory_engine_minutes_1h (deployment_id, bucket, minutes, at_us, running_max,
    latency_p99_max)
SELECT k.deployment_id, k.hour, count(*),
    string_agg(int8send((extract(epoch FROM r.bucket) * 1000000)::bigint), ''::bytea
               ORDER BY r.bucket),
    string_agg(float8send(coalesce(r.running_max::text::float8, 'NaN')), ''::bytea
               ORDER BY r.bucket),
    string_agg(float8send(coalesce(r.latency_p99_max::text::float8, 'NaN')), ''::bytea
               ORDER BY r.bucket)
FROM refreshed_engine_keys k
JOIN inventory_engine_rollup_1m r ON r.deployment_id = k.deployment_id
 AND r.bucket >= k.hour AND r.bucket <= k.last
GROUP BY 1, 2
"""
# Each pack: its table, the temporary table of its changed keys (and their columns), what
# finds them, and what makes them again.
_SPLICES = (
    ("inventory_memory_minutes_1h", "refreshed_memory_keys", ("gpu_id", "deployment_id"),
     CHANGED_MEMORY, SPLICE_MEMORY),
    ("inventory_engine_minutes_1h", "refreshed_engine_keys", ("deployment_id",),
     CHANGED_ENGINES, SPLICE_ENGINES),
)  # fmt: skip

# The last minute with rows in each hour: where an hour is recomputed without knowing it.
LAST_MINUTE = " UNION ALL ".join(
    f"SELECT max(bucket) FROM inventory_{kind}_rollups_1m(%(start)s, %(end)s) "
    "WHERE bucket >= %(start)s AND bucket < %(end)s"
    for kind in ("card", "process", "engine")
)

# Where the host of a row is found: cards and processes by their card, engines by their
# deployment.
_OWNERS = {
    "card": ("inventory_gpu", "gpu_id"),
    "process": ("inventory_gpu", "gpu_id"),
    "engine": ("inventory_deployment", "deployment_id"),
}
# The rows of the hosts marked, by their cards' and deployments' ids: read with the indexes
# on (card, time) and (deployment, time), not from every row of the minute.
OF_HOSTS = {
    "card": " AND gpu_id = ANY(%(gpus)s::bigint[])",
    "process": " AND gpu_id = ANY(%(gpus)s::bigint[])",
    "engine": " AND deployment_id = ANY(%(deployments)s::bigint[])",
}
HOSTS_OWN = """
SELECT array(SELECT id FROM inventory_gpu WHERE host_id = ANY(%(hosts)s::bigint[])),
       array(SELECT id FROM inventory_deployment WHERE host_id = ANY(%(hosts)s::bigint[]))
"""
# The marks of the dirty minutes a refresh takes: a mark names a minute and a host, or every
# host. The newest hours come first, each hour's minutes in time order: after an outage or
# at a first start (the demo's month of history) the present is rolled up within a cycle,
# the backlog behind it; an hour's minutes in order keep its folds appending. Hours fold
# apart from each other, so their order does not change a figure.
DIRTY = """
SELECT id, bucket, host_id, batch_id FROM inventory_rollup_dirty
WHERE bucket IN (SELECT bucket FROM (SELECT DISTINCT bucket FROM inventory_rollup_dirty) d
                 ORDER BY date_trunc('hour', bucket, 'UTC') DESC, bucket LIMIT %s)
"""
EVERY_HOST = 0
_MINUTE = dt.timedelta(minutes=1)
# A minute marked by more hosts than this is recomputed for every host: the steady state,
# where each minute is filled by the whole fleet.
HOSTS_APART = 1000

_KINDS = (
    ("card", MINUTE_OF_CARDS, HOUR_OF_CARDS),
    ("process", MINUTE_OF_PROCESSES, HOUR_OF_PROCESSES),
    ("engine", MINUTE_OF_ENGINES, HOUR_OF_ENGINES),
)


def _parts(minute_sql: str) -> tuple[str, list[str], str]:
    """A minute statement's table, the columns it inserts and the SELECT that makes them."""
    table, columns, select = re.search(
        r"INSERT INTO (\w+) \(([^)]*)\)\s*(SELECT .*)", minute_sql, re.S
    ).groups()
    return table, [c.strip() for c in columns.split(",")], select.rstrip()


def _replacing(kind: str, minute_sql: str) -> str:
    """The ON CONFLICT clause that writes a recomputed minute row over the one there, in place:
    a minute refreshed again (the minute being filled, every cycle) has its rows rewritten on
    their own pages (HOT updates: the minute partitions keep room, `partitions.TABLES`), its
    indexes left alone."""
    _table, columns, _select = _parts(minute_sql)
    figures = [c for c in columns if c not in _KEYS[kind]]
    return f"ON CONFLICT ({', '.join(_KEYS[kind])}) DO UPDATE SET " + ", ".join(
        f"{c} = excluded.{c}" for c in figures
    )


_REPLACING = {kind: _replacing(kind, minute_sql) for kind, minute_sql, _hour_sql in _KINDS}
# The samples a minute is recomputed from leave out those of the batches whose marks this
# refresh did not read (written since it read its marks): the refresh that reads them folds
# them in (`FOLDED_MINUTES`), and they must not be in the rows already.
OF_READ = (
    " AND batch_id NOT IN (SELECT batch_id FROM inventory_rollup_dirty"
    " WHERE bucket = ANY(%(minutes)s) AND batch_id IS NOT NULL"
    " AND id <> ALL(%(marks)s::bigint[]))"
)
OF_BATCHES = " AND batch_id = ANY(%(batches)s::uuid[])"
# The kinds whose minute rows take a batch's samples by folding them in: their figures are
# integer sums, maxima, minima and ors, the same in any order. An engine minute's float sums
# are summed in time order, so its minute is recomputed.
FOLDED_MINUTES = ("card", "process")


def _folding(kind: str, minute_sql: str) -> str:
    """The statement that folds the samples of a span's batches into their minute rows, and
    keeps those batches' figures (`HELD`, `batches`) for the hours. A batch's samples are the
    minute's only where it has them, so a minute row merged with the batches' figures is the
    row a recompute of all its samples gives."""
    table, columns, select = _parts(minute_sql)
    listed = ", ".join(columns)
    batches = HELD.format(kind=kind, age="batches")
    return (
        f"WITH batches AS ({select}), "
        f"kept AS (INSERT INTO {batches} ({listed}) SELECT * FROM batches) "
        f"INSERT INTO {table} AS h ({listed}) SELECT * FROM batches "
        f"ON CONFLICT ({', '.join(_KEYS[kind])}) DO UPDATE SET {_merged(kind)}"
    )


_FOLDING = {
    kind: _folding(kind, minute_sql)
    for kind, minute_sql, _hour_sql in _KINDS
    if kind in FOLDED_MINUTES
}
# How many dirty minutes one refresh takes: a backlog (a long backfill) goes in pieces.
MINUTES_PER_REFRESH = 240
REFRESH_LOCK = packing.REFRESH_LOCK


def _hour(moment: dt.datetime) -> dt.datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _span(hours: list[dt.datetime]) -> dict:
    return {"hours": hours, "first": hours[0], "last": hours[-1] + dt.timedelta(hours=1)}


@transaction.atomic
def refresh(limit: int = MINUTES_PER_REFRESH) -> int:
    """Recompute the rollups of up to `limit` dirty minutes; return how many were refreshed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [REFRESH_LOCK])
        # Its aggregates and sorts take a fleet's minute rows at once: in memory, not on disk.
        cursor.execute(
            "SELECT set_config('work_mem', %s, true)",
            [f"{settings.ROLLUP_REFRESH_WORK_MEM_MB}MB"],
        )
        cursor.execute(DIRTY, [limit])
        marks = cursor.fetchall()
        if not marks:
            return 0
        hosts_of: dict[dt.datetime, set[int] | None] = {}
        batches_of: dict[dt.datetime, set | None] = {}
        for _id, bucket, host, batch in marks:
            hosts = hosts_of.setdefault(bucket, set())
            if hosts is not None:
                hosts.add(host)
                if EVERY_HOST in hosts or len(hosts) > HOSTS_APART:
                    hosts_of[bucket] = None
            batches = batches_of.setdefault(bucket, set())
            if batch is None:
                batches_of[bucket] = None
            elif batches is not None:
                batches.add(batch)
        dirty = sorted(hosts_of)
        # A late minute of an hour already packed: its minute rows are rewritten below.
        packing.unpack_hours(cursor, packing.MINUTE_TABLES, sorted({_hour(m) for m in dirty}))
        targets = _targets(cursor, hosts_of, batches_of, [m[0] for m in marks])
        minutes, folded = _refresh_minutes(cursor, targets)
        if minutes:
            running_blocks.invalidate(cursor, sorted({_hour(minute) for minute in minutes}))
            apart = all("deployments" in span for span in targets)
            deployments = {d for span in targets for d in span["deployments"]} if apart else None
            _refresh_hours(cursor, minutes, deployments, folded)
            packing.mark_due(cursor, sorted({_hour(minute) for minute in minutes}))
        # Only the marks read: one written since, by a batch this refresh may not have seen,
        # stays for the next.
        cursor.execute(
            "DELETE FROM inventory_rollup_dirty WHERE id = ANY(%s)", [[m[0] for m in marks]]
        )
    return len(dirty)


def _targets(
    cursor,
    hosts_of: dict[dt.datetime, set[int] | None],
    batches_of: dict[dt.datetime, set | None],
    marks: list[int],
) -> list[dict]:
    """The dirty minutes as spans to recompute: the minutes of every host in one, and those
    of a few hosts (a late batch) grouped by their hosts, with those hosts' cards and
    deployments; apart again, the minutes whose marks all name their batch, with those
    batches (folded in where a kind allows it: `FOLDED_MINUTES`)."""
    grouped: dict[tuple, list[dt.datetime]] = {}
    for minute in sorted(hosts_of):
        hosts = hosts_of[minute]
        key = (hosts is not None, frozenset(hosts or ()), batches_of[minute] is not None)
        grouped.setdefault(key, []).append(minute)
    targets = []
    for (apart, hosts, folded), minutes in grouped.items():
        span = {
            "minutes": minutes,
            "first": minutes[0],
            "last": minutes[-1] + _MINUTE,
            "marks": marks,
        }
        if folded:
            span["batches"] = sorted(b for minute in minutes for b in batches_of[minute])
        if apart:
            cursor.execute(HOSTS_OWN, {"hosts": sorted(hosts)})
            span["gpus"], span["deployments"] = cursor.fetchone()
        targets.append(span)
    return targets


def _refresh_minutes(cursor, targets: list[dict]) -> tuple[list[dt.datetime], set[str]]:
    """Recompute the dirty minutes' rows from their raw samples (of the hosts marked, or of
    every host), or fold their batches' samples in (`FOLDED_MINUTES`), keeping their old and
    new rows in the `HELD` tables; return the minutes that have raw samples, and the kinds
    folded in every span. A host with no raw samples left in a minute keeps its rows there
    (its samples are gone, aged out with their partition)."""
    for kind, minute_sql, _hour_sql in _KINDS:
        old, new = HELD.format(kind=kind, age="old"), HELD.format(kind=kind, age="new")
        ages = AGES if kind in _FOLDING else ("old", "new")
        for held in (HELD.format(kind=kind, age=age) for age in ages):
            cursor.execute(
                f"CREATE TEMPORARY TABLE IF NOT EXISTS {held} (LIKE inventory_{kind}_rollup_1m)"
            )
            cursor.execute(f"TRUNCATE {held}")
        for span in targets:
            of_hosts = OF_HOSTS[kind] if "gpus" in span else ""
            rows = f"SELECT * FROM inventory_{kind}_rollup_1m WHERE bucket = ANY(%(minutes)s)"
            cursor.execute(f"INSERT INTO {old} {rows}{of_hosts}", span)
            if "batches" in span and kind in _FOLDING:
                # The rows as they are made are read back whole, not returned by the fold: the
                # minute's rows that no batch here touched are then held unchanged (not gone).
                cursor.execute(
                    _FOLDING[kind].format(of_hosts=of_hosts, of_batches=OF_BATCHES), span
                )
                cursor.execute(f"INSERT INTO {new} {rows}{of_hosts}", span)
                continue
            made = minute_sql.format(of_hosts=of_hosts, of_batches=OF_READ).rstrip()
            cursor.execute(
                f"WITH made AS ({made} {_REPLACING[kind]} RETURNING *) "
                f"INSERT INTO {new} SELECT * FROM made",
                span,
            )
    cursor.execute(
        " UNION ".join(f"SELECT DISTINCT bucket FROM {HELD.format(kind=kind, age='new')}"
                       for kind, _minute_sql, _hour_sql in _KINDS)
    )  # fmt: skip
    minutes = sorted(row[0] for row in cursor.fetchall())
    # A folded row is its old row merged with the batches' figures, and the minute's rows are
    # read back whole: every old row has its new one, which holds it. Neither the check here
    # nor the hours' (`_not_held`) can find anything there.
    folded = {kind for kind in _FOLDING if all("batches" in span for span in targets)}
    if any(
        _vanished(cursor, kind) for kind, _minute_sql, _hour_sql in _KINDS if kind not in folded
    ):
        _drop_rows_not_made_again(cursor)
    return minutes, folded


def _matched(kind: str, a: str, b: str) -> str:
    return " AND ".join(f"{a}.{column} = {b}.{column}" for column in _KEYS[kind])


def _vanished(cursor, kind: str) -> bool:
    """Whether a refreshed minute lost a row of this kind: rare, since raw samples only grow."""
    old, new = HELD.format(kind=kind, age="old"), HELD.format(kind=kind, age="new")
    key = ", ".join(_KEYS[kind])
    # A set difference, hashed: the temporary tables have no index, and a NOT EXISTS planned
    # for its first row compares every old row with every new one.
    cursor.execute(
        f"SELECT count(*) FROM (SELECT {key} FROM {old} EXCEPT SELECT {key} FROM {new}) gone"
    )
    return cursor.fetchone()[0] > 0


def _drop_rows_not_made_again(cursor) -> None:
    """Delete the old rows the recompute did not make again, except those of a host that has
    no new row in their minute, of any kind: its raw samples there are gone (aged out), and
    the rollups outlive them. Those stay as they were, and are no longer held as old (nothing
    of them changed). A host's rows depend on its own samples alone, so a minute refreshed for
    one host or for every host keeps the same rows."""
    cursor.execute(
        "CREATE TEMPORARY TABLE IF NOT EXISTS refreshed_hosts (bucket timestamptz, host_id bigint)"
    )
    cursor.execute("TRUNCATE refreshed_hosts")
    cursor.execute(
        "INSERT INTO refreshed_hosts "
        + " UNION ".join(
            f"SELECT n.bucket, w.host_id FROM {HELD.format(kind=kind, age='new')} n "
            f"JOIN {table} w ON w.id = n.{column}"
            for kind, (table, column) in _OWNERS.items()
        )
    )
    for kind, (table, column) in _OWNERS.items():
        old, new = HELD.format(kind=kind, age="old"), HELD.format(kind=kind, age="new")
        key = ", ".join(_KEYS[kind])
        gone = f"(SELECT {key} FROM {old} EXCEPT SELECT {key} FROM {new}) gone"
        cursor.execute(
            f"DELETE FROM {old} o USING {gone} WHERE {_matched(kind, 'gone', 'o')} "
            f"AND NOT EXISTS (SELECT 1 FROM refreshed_hosts h JOIN {table} w "
            f"ON w.host_id = h.host_id WHERE h.bucket = o.bucket AND w.id = o.{column})"
        )
        cursor.execute(
            f"DELETE FROM inventory_{kind}_rollup_1m r USING {gone} "
            f"WHERE {_matched(kind, 'gone', 'r')}"
        )


def _refresh_hours(
    cursor, minutes: list[dt.datetime], deployments: set[int] | None, folded: set[str]
) -> None:
    """Bring the hours of the refreshed minutes up to date: fold the minutes in where the hour
    allows it, recompute it whole where not; note each hour's last minute. `deployments`:
    those of the hosts refreshed, where the minutes were refreshed for a few hosts only;
    `folded`: the kinds whose minute rows were folded, which hold their old rows: their hours
    take the batches' figures."""
    hours = sorted({_hour(minute) for minute in minutes})
    cursor.execute(
        "SELECT bucket, last_minute FROM inventory_rollup_hour_folded WHERE bucket = ANY(%s)",
        [hours],
    )
    folded_to = dict(cursor.fetchall())
    first_of = {}
    for minute in minutes:
        first_of.setdefault(_hour(minute), minute)
    folds = {hour for hour in hours if hour in folded_to}
    if folds:
        for kind in _MERGES.keys() - folded:
            cursor.execute(_not_held(kind))
            folds -= {row[0] for row in cursor.fetchall()}
    wholes = [hour for hour in hours if hour not in folds]
    folds = sorted(folds)
    late = [hour for hour in folds if first_of[hour] < folded_to[hour]]
    if folds:
        for kind, fold_sql in _FOLDS:
            minutes_of = BATCHES.format(kind=kind) if kind in folded else CHANGES[kind]
            cursor.execute(fold_sql.format(minutes=minutes_of), {"hours": folds})
        if late:
            _splice(cursor, {"hours": late, "lasts": [folded_to[hour] for hour in late]})
        refreshed = set(minutes)
        again = [hour for hour in folds if folded_to[hour] in refreshed]
        for table, columns, append_sql, (lost, matched) in _APPENDS:
            stripping = {"hours": again, "lasts": [folded_to[hour] for hour in again]}
            if again and _any(cursor, lost, stripping):
                cursor.execute(
                    STRIP_LAST.format(
                        table=table, strip=_stripped(columns), lost=lost, matched=matched
                    ),
                    stripping,
                )
                if 0 in {row[0] for row in cursor.fetchall()}:
                    cursor.execute(
                        f"DELETE FROM {table} WHERE bucket = ANY(%s) AND minutes = 0", [again]
                    )
            cursor.execute(append_sql, {"hours": folds, "lasts": [folded_to[h] for h in folds]})
    for kind, _minute_sql, hour_sql in _KINDS:
        if wholes:
            cursor.execute(
                f"DELETE FROM inventory_{kind}_rollup_1h WHERE bucket = ANY(%s)", [wholes]
            )
            cursor.execute(hour_sql.format(of_refreshed=""), _span(wholes))
    # The engine hour rows of a folded hour fold the minutes from its last on; those of an
    # hour with a late minute are recomputed, their sums being floating point (the minutes
    # after the late one would have to come off): every deployment's, or where only some
    # hosts were refreshed, theirs.
    engine_folds = [hour for hour in folds if hour not in late]
    if engine_folds:
        cursor.execute(ENGINE_FOLD, {"hours": engine_folds})
    if late:
        of_refreshed = "" if deployments is None else OF_REFRESHED
        span = {**_span(late), "deployments": sorted(deployments or ())}
        cursor.execute(
            f"DELETE FROM inventory_engine_rollup_1h WHERE bucket = ANY(%(hours)s){of_refreshed}",
            span,
        )
        cursor.execute(HOUR_OF_ENGINES.format(of_refreshed=of_refreshed), span)
    if wholes:
        _pack(cursor, _span(wholes))
    last_of = {}
    for minute in minutes:
        last_of[_hour(minute)] = minute
    for hour in hours:
        if hour in folded_to:
            last_of[hour] = max(last_of[hour], folded_to[hour])
        else:
            last_of[hour] = max(last_of[hour], _last_minute(cursor, hour))
    _note_folded(cursor, last_of)


def _any(cursor, query: str, params: dict) -> bool:
    cursor.execute(f"SELECT EXISTS ({query})", params)
    return cursor.fetchone()[0]


def _splice(cursor, late: dict) -> None:
    """Make again the packs whose entry for a late minute changed (`late`: the hours with one,
    and each hour's last minute before this refresh)."""
    for table, keys, columns, changed_sql, splice_sql in _SPLICES:
        cursor.execute(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {keys} AS SELECT {', '.join(columns)}, "
            f"bucket AS hour, bucket AS last FROM {table} WITH NO DATA"
        )
        cursor.execute(f"TRUNCATE {keys}")
        cursor.execute(changed_sql, late)
        if not cursor.rowcount:
            continue
        matched = " AND ".join(f"p.{c} = k.{c}" for c in columns)
        cursor.execute(
            f"DELETE FROM {table} p USING {keys} k WHERE {matched} AND p.bucket = k.hour"
        )
        cursor.execute(splice_sql)


def _last_minute(cursor, hour: dt.datetime) -> dt.datetime:
    cursor.execute(LAST_MINUTE, {"start": hour, "end": hour + dt.timedelta(hours=1)})
    return max(row[0] for row in cursor.fetchall() if row[0] is not None)


def _note_folded(cursor, last_of: dict[dt.datetime, dt.datetime]) -> None:
    cursor.execute(
        "INSERT INTO inventory_rollup_hour_folded (bucket, last_minute) "
        "SELECT * FROM unnest(%s::timestamptz[], %s::timestamptz[]) "
        "ON CONFLICT (bucket) DO UPDATE SET last_minute = excluded.last_minute",
        [list(last_of), list(last_of.values())],
    )


def _pack(cursor, by_hour: dict) -> None:
    for table, pack_sql in _PACKS:
        cursor.execute(f"DELETE FROM {table} WHERE bucket = ANY(%s)", [by_hour["hours"]])
        cursor.execute(pack_sql, by_hour)


def _hours(start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    hours = []
    hour = _hour(start.astimezone(dt.UTC))
    while hour <= end:
        hours.append(hour)
        hour += dt.timedelta(hours=1)
    return hours


@transaction.atomic
def pack_hours(start: dt.datetime, end: dt.datetime) -> None:
    """Pack again every hour that [start, end] touches, from the minute rollups as they are:
    for minute rollups written other than through a refresh (the benchmark's generated
    history, tests that write minutes straight). The hour rows are left as they are, so the
    next refresh of those hours recomputes them whole."""
    hours = _hours(start, end)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [REFRESH_LOCK])
        running_blocks.invalidate(cursor, hours)
        _pack(cursor, _span(hours))
        cursor.execute("DELETE FROM inventory_rollup_hour_folded WHERE bucket = ANY(%s)", [hours])


@transaction.atomic
def rebuild_hours(start: dt.datetime, end: dt.datetime) -> None:
    """Recompute the hour rows and packs of every hour that [start, end] touches from the
    minute rollups as they are, as a refresh of each hour's minutes would leave them (the
    benchmark's generated history, the tests' from-scratch reference)."""
    hours = _hours(start, end)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [REFRESH_LOCK])
        running_blocks.invalidate(cursor, hours)
        for kind, _minute_sql, hour_sql in _KINDS:
            cursor.execute(
                f"DELETE FROM inventory_{kind}_rollup_1h WHERE bucket = ANY(%s)", [hours]
            )
            cursor.execute(hour_sql.format(of_refreshed=""), _span(hours))
        _pack(cursor, _span(hours))
        cursor.execute("DELETE FROM inventory_rollup_hour_folded WHERE bucket = ANY(%s)", [hours])
        last_of = {}
        for hour in hours:
            cursor.execute(LAST_MINUTE, {"start": hour, "end": hour + dt.timedelta(hours=1)})
            found = [row[0] for row in cursor.fetchall() if row[0] is not None]
            if found:
                last_of[hour] = max(found)
        if last_of:
            _note_folded(cursor, last_of)


def refresh_all() -> int:
    """Refresh until nothing is dirty (tests, backfills, the benchmark)."""
    total = 0
    while refreshed := refresh():
        total += refreshed
    return total
