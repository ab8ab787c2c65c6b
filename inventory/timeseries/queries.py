"""Reading telemetry back: every query the reports, the API and the gates make over samples
and rollups, one named function each (ingest, partitions and rollups write their own).

A series comes from raw samples, the 1-minute or the 1-hour rollup, whichever is the coarsest
table still finer than the step and still holding the start of the window. Every point keeps
the bucket's maximum (so a peak shows at any zoom) beside its mean; points are labelled by the
start of their step, counted in whole steps from the epoch.
"""

import datetime as dt
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import NamedTuple

import numpy as np
from django.conf import settings
from django.db import connection
from django.utils import timezone

from inventory.analytics.stats import interpolate_percentile, percentile_ranks
from inventory.timeseries import packing, running_blocks


@dataclass(frozen=True)
class Source:
    """Where a series is read from. The tables are FROM items: raw samples and minute rollups
    through their reader functions over the window's span %(lo)s..%(hi)s (rows and packs,
    inventory.timeseries.packing), hourly rollups as they are."""

    name: str  # "raw", "1m" or "1h"
    resolution_s: int
    card_table: str
    process_table: str

    @property
    def time_column(self) -> str:
        """Raw samples carry their time in `ts`, rollups label each bucket by its start."""
        return "ts" if self.resolution_s == 0 else "bucket"


RAW = Source("raw", 0, "inventory_card_samples(%(lo)s, %(hi)s)",
             "inventory_process_samples(%(lo)s, %(hi)s)")  # fmt: skip
MINUTE = Source("1m", 60, "inventory_card_rollups_1m(%(lo)s, %(hi)s)",
                "inventory_process_rollups_1m(%(lo)s, %(hi)s)")  # fmt: skip
HOUR = Source("1h", 3600, "inventory_card_rollup_1h", "inventory_process_rollup_1h")


# Points sit on whole steps since the epoch (hours on the hour), whatever the window's start.
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _window_start(start: dt.datetime, source: Source) -> dt.datetime:
    """Rollup buckets are labelled by their start: include the one that overlaps `start`."""
    if source is RAW:
        return start - dt.timedelta(microseconds=1)
    return start - dt.timedelta(seconds=source.resolution_s)


def choose_source(start: dt.datetime, step_s: int, now: dt.datetime | None = None) -> Source:
    now = now or timezone.now()
    age = now - start
    if step_s < 60 and age <= dt.timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS):
        return RAW
    if step_s < 3600 and age <= dt.timedelta(days=settings.TELEMETRY_1M_RETENTION_DAYS):
        return MINUTE
    return HOUR


def _rows(sql: str, params: list) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _tuples(sql: str, params: list) -> list[tuple]:
    """As `_rows`, in the SELECT's order: for rows by the thousand, built straight into a
    class whose fields come in that order (no dict a row)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _since(gpu_ids: list[int], since: dt.datetime) -> dict:
    return {"gpu_ids": gpu_ids, "since": since, "packs": packing.packs_may_hold(since)}


def latest_card_samples(gpu_ids: list[int], within: dt.timedelta) -> dict[int, dict]:
    """The newest raw sample of each card, if it is not older than `within`."""
    if not gpu_ids:
        return {}
    rows = _rows(
        """
        SELECT g.id AS gpu_id, s.ts, s.total_bytes, s.used_max, s.used_last, s.reserved_last,
               s.free_min, s.free_last, s.util_gpu_last, s.lost, s.frag_index_max
        FROM unnest(%(gpu_ids)s::bigint[]) AS g(id)
        CROSS JOIN LATERAL inventory_card_sample_newest(g.id, %(since)s, 'infinity', %(packs)s) s
        """,
        _since(gpu_ids, timezone.now() - within),
    )
    return {row["gpu_id"]: row for row in rows}


_CARD_POINT = {
    "raw": """max(used_max) AS used_max, avg(used_last)::bigint AS used_mean,
              max(reserved_last) AS reserved, min(free_min) AS free_min,
              max(total_bytes) AS total, max(util_gpu_max) AS util_gpu_max,
              max(frag_index_max) AS frag_index_max, bool_or(lost) AS lost""",
    "rollup": """max(used_max) AS used_max,
                 (sum(used_sum) / nullif(sum(used_count), 0))::bigint AS used_mean,
                 max(reserved_max) AS reserved, min(free_min) AS free_min,
                 max(total_bytes) AS total, max(util_gpu_max) AS util_gpu_max,
                 max(frag_index_max) AS frag_index_max, bool_or(lost) AS lost""",
}


def _series_params(gpu_ids, start, end, step_s, source: Source) -> dict:
    return {
        "gpu_ids": gpu_ids, "lo": _window_start(start, source), "hi": end, "step_s": step_s,
        "epoch": EPOCH,
    }  # fmt: skip


def card_series(
    gpu_ids: list[int], start: dt.datetime, end: dt.datetime, step_s: int, source: Source
) -> list[dict]:
    """One row per card and step: gpu_id, ts (bucket start) and the point's figures."""
    time_column = source.time_column
    point = _CARD_POINT["raw" if source is RAW else "rollup"]
    return _rows(
        f"""
        SELECT gpu_id, date_bin(make_interval(secs => %(step_s)s), {time_column}, %(epoch)s) AS ts,
               {point}
        FROM {source.card_table}
        WHERE gpu_id = ANY(%(gpu_ids)s) AND {time_column} > %(lo)s AND {time_column} < %(hi)s
        GROUP BY 1, 2 ORDER BY 1, 2
        """,
        _series_params(gpu_ids, start, end, step_s, source),
    )


def process_series(
    gpu_ids: list[int], start: dt.datetime, end: dt.datetime, step_s: int, source: Source
) -> list[dict]:
    """One row per card, process and step: the process's peak memory in the step."""
    time_column = source.time_column
    return _rows(
        f"""
        SELECT gpu_id, pid, max(name) AS name, max(deployment_id) AS deployment_id,
               date_bin(make_interval(secs => %(step_s)s), {time_column}, %(epoch)s) AS ts,
               max(used_max) AS used_max, max(frag_index_max) AS frag_index_max
        FROM {source.process_table}
        WHERE gpu_id = ANY(%(gpu_ids)s) AND {time_column} > %(lo)s AND {time_column} < %(hi)s
        GROUP BY gpu_id, pid, 5 ORDER BY gpu_id, pid, 5
        """,
        _series_params(gpu_ids, start, end, step_s, source),
    )


def latest_process_memory(gpu_ids: list[int], within: dt.timedelta) -> dict[tuple[int, int], int]:
    """Memory each deployment's processes hold on each card in the card's newest sample (if
    younger than `within`): only the processes that sample saw, so an engine restarted with a
    new PID is not counted twice, nor one that exited."""
    if not gpu_ids:
        return {}
    rows = _rows(
        """
        SELECT p.gpu_id, p.deployment_id, p.used_last
        FROM unnest(%(gpu_ids)s::bigint[]) AS g(id)
        CROSS JOIN LATERAL
            inventory_card_sample_newest(g.id, %(since)s, 'infinity', %(packs)s) newest
        JOIN inventory_process_samples(%(since)s, 'infinity') p
            ON p.gpu_id = g.id AND p.ts = newest.ts
        WHERE p.deployment_id IS NOT NULL AND p.used_last IS NOT NULL
        """,
        _since(gpu_ids, timezone.now() - within),
    )
    held: dict[tuple[int, int], int] = {}
    for row in rows:
        key = (row["gpu_id"], row["deployment_id"])
        held[key] = held.get(key, 0) + row["used_last"]
    return held


# --- Named queries the reports compose (the ledger, capacity, charts, KV, the fleet board).


def card_samples_at(gpu_ids: list[int], at: dt.datetime, within: dt.timedelta) -> dict[int, dict]:
    """Each card's newest raw sample at or before `at`, if it is younger than `within` then."""
    rows = _rows(
        """
        SELECT DISTINCT ON (gpu_id) gpu_id, ts, batch_id, total_bytes, used_last,
               reserved_last, free_last
        FROM inventory_card_samples(%s, %s)
        WHERE gpu_id = ANY(%s) AND ts <= %s AND ts > %s
        ORDER BY gpu_id, ts DESC
        """,
        [at - within, at, gpu_ids, at, at - within],
    )
    return {row["gpu_id"]: row for row in rows}


def process_samples_of_batches(
    gpu_ids: list[int], batch_ids: list, start: dt.datetime, end: dt.datetime
) -> list[dict]:
    """The process samples (NVML memory and allocator statistics) that came in these batches."""
    if not batch_ids:
        return []
    return _rows(
        """
        SELECT gpu_id, pid, deployment_id, mig_slice_id, used_last, alloc_reserved_last,
               alloc_allocated_last, alloc_inactive_split_last, alloc_largest_free_last
        FROM inventory_process_samples(%s, %s)
        WHERE gpu_id = ANY(%s) AND batch_id = ANY(%s) AND ts > %s AND ts <= %s
        """,
        [start, end, gpu_ids, batch_ids, start, end],
    )


def mig_samples_of_batches(
    slice_ids: list[int], batch_ids: list, start: dt.datetime, end: dt.datetime
) -> dict[int, dict]:
    """Each MIG device's sample (its GPU instance's memory) in these batches."""
    if not slice_ids or not batch_ids:
        return {}
    rows = _rows(
        """
        SELECT DISTINCT ON (mig_slice_id) mig_slice_id, total_bytes, used_last
        FROM inventory_mig_samples(%s, %s)
        WHERE mig_slice_id = ANY(%s) AND batch_id = ANY(%s) AND ts > %s AND ts <= %s
        ORDER BY mig_slice_id, ts DESC
        """,
        [start, end, slice_ids, batch_ids, start, end],
    )
    return {row["mig_slice_id"]: row for row in rows}


def engine_kv_at(deployment_ids: list[int], at: dt.datetime, within: dt.timedelta) -> dict:
    """Each deployment's newest engine KV figures at or before `at`: its usage (a fraction of
    the engine's pool) and the pool as the engine reported it (tokens, bytes when stated, the
    memory fraction it was started with); a field the engine does not report is None."""
    rows = _rows(
        """
        SELECT DISTINCT ON (deployment_id) deployment_id, kv_usage_last AS usage,
               kv_pool_tokens AS pool_tokens, kv_pool_bytes AS pool_bytes, memory_fraction
        FROM inventory_engine_samples(%s, %s)
        WHERE deployment_id = ANY(%s) AND ts <= %s AND ts > %s
          AND (kv_usage_last IS NOT NULL OR kv_pool_tokens IS NOT NULL)
        ORDER BY deployment_id, ts DESC
        """,
        [at - within, at, deployment_ids, at, at - within],
    )
    return {row.pop("deployment_id"): row for row in rows}


def driver_reserved_at(gpu_id: int, at: dt.datetime) -> int | None:
    """What the driver held on the card in its newest sample at or before `at`."""
    rows = _rows(
        "SELECT reserved_last FROM inventory_card_sample_newest(%s, '-infinity', %s, true)",
        [gpu_id, at],
    )
    return rows[0]["reserved_last"] if rows else None


def deployment_demand(gpu_id: int, start: dt.datetime, end: dt.datetime) -> list[dict]:
    """Per sample time and deployment on the card: bytes allocated (NVML's per-process figure
    where no allocator statistics exist), bytes the allocators held unallocated, bytes held
    outside the allocators (NVML used - allocator reserved: CUDA context, library workspaces),
    the count of processes with allocator statistics but no NVML figure (their context is
    unknown), the worst fragmentation index, and whether any index there was the fallback
    (inactive split / reserved: no largest-free-block figure), a different scale."""
    return _rows(
        """
        SELECT ts, deployment_id,
               sum(coalesce(alloc_allocated_last, used_max)) AS allocated,
               sum(greatest(coalesce(alloc_reserved_last - alloc_allocated_last, 0), 0)) AS held,
               sum(greatest(used_last - alloc_reserved_last, 0)) AS outside,
               count(*) FILTER (
                   WHERE alloc_reserved_last IS NOT NULL AND used_last IS NULL
               ) AS blind,
               max(frag_index_max) AS frag,
               bool_or(frag_index_max IS NOT NULL AND alloc_largest_free_last IS NULL)
                   AS frag_fallback
        FROM inventory_process_samples(%s, %s)
        WHERE gpu_id = %s AND ts > %s AND ts <= %s
        GROUP BY ts, deployment_id
        """,
        [start, end, gpu_id, start, end],
    )


def deployment_memory_series(
    gpu_ids: list[int], start: dt.datetime, end: dt.datetime, step_s: int, source: Source
) -> list[dict]:
    """Per deployment, card and step: the highest memory any of its processes held (by
    deployment, not PID, so a restart continues the line)."""
    time_column = source.time_column
    return _rows(
        f"""
        SELECT gpu_id, deployment_id,
               date_bin(make_interval(secs => %(step_s)s), {time_column}, %(epoch)s) AS ts,
               max(used_max) AS used_max
        FROM {source.process_table}
        WHERE gpu_id = ANY(%(gpu_ids)s) AND {time_column} > %(lo)s AND {time_column} < %(hi)s
          AND deployment_id IS NOT NULL
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        """,
        _series_params(gpu_ids, start, end, step_s, source),
    )


def _microseconds(moment: dt.datetime) -> int:
    """Epoch microseconds, exactly (what a pack stores for a minute's start)."""
    return (moment - EPOCH) // dt.timedelta(microseconds=1)


def _unpack(packed: bytes, dtype: str) -> np.ndarray:
    """A packed figure (`rollups`: big-endian 8-byte values) as a native array."""
    return np.frombuffer(packed, dtype=dtype).astype(dtype.replace(">", "="))


def _inside(at_us: np.ndarray, start: dt.datetime, end: dt.datetime | None = None) -> np.ndarray:
    """Which minutes lie in (start, end]: a pack is an hour, a window starts (and ends) inside
    one."""
    inside = at_us > _microseconds(start)
    if end is not None:
        inside &= at_us <= _microseconds(end)
    return inside


def deployment_memory_minutes(
    gpu_ids: list[int], start: dt.datetime
) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """What the co-peak analysis reads: per card and deployment on it, its minutes since
    `start` (epoch microseconds, ascending) and in each the highest memory any of its
    processes held (by deployment, not PID: a restart continues the line), as two int64
    arrays; minutes without a deployment or a figure are left out.

    Read from the hourly packs of the minute rollups (`rollups.PACK_OF_MEMORY`): a week of a
    shared card is a few hundred rows, where its minute rows are tens of thousands.
    """
    rows = _tuples(
        """
        SELECT gpu_id, deployment_id, string_agg(at_us, ''::bytea ORDER BY bucket),
               string_agg(used_max, ''::bytea ORDER BY bucket)
        FROM inventory_memory_minutes_1h
        WHERE gpu_id = ANY(%s) AND bucket > %s
        GROUP BY gpu_id, deployment_id
        """,
        [gpu_ids, start - dt.timedelta(hours=1)],
    )
    answer = []
    for gpu_id, deployment_id, packed_at, used_max in rows:
        at_us = _unpack(packed_at, ">i8")
        inside = _inside(at_us, start)
        if inside.any():
            answer.append((gpu_id, deployment_id, at_us[inside], _unpack(used_max, ">i8")[inside]))
    return answer


class EngineMinute(NamedTuple):
    """A tuple, not a dataclass: a host's week of minutes is tens of thousands of them, and a
    tuple is built several times faster."""

    deployment_id: int
    at: float  # epoch seconds of the minute's start
    running_max: float | None
    running_sum: float
    running_count: int
    requests: float
    latency_p99_max: float | None
    requests_s: float | None  # the seconds `requests` were counted over (None: before 0026)


def engine_minutes(
    deployment_ids: list[int], start: dt.datetime, end: dt.datetime
) -> dict[int, list[EngineMinute]]:
    """Per deployment, its engine's one-minute rollups in (start, end], oldest first.

    The basis of every concurrency figure: the KV advice, the KV gate and the KV gap in
    /metrics all take the P95 over these minutes' peaks of running requests.
    """
    rows = _tuples(
        """
        SELECT deployment_id, extract(epoch FROM bucket)::float8 AS at, running_max,
               running_sum, running_count, requests, latency_p99_max, requests_s
        FROM inventory_engine_rollups_1m(%s, %s)
        WHERE deployment_id = ANY(%s) AND bucket > %s AND bucket <= %s
        ORDER BY deployment_id, bucket
        """,
        [start, end, deployment_ids, start, end],
    )
    # Ordered by deployment: each one's minutes are one run of rows.
    return {
        deployment_id: list(map(EngineMinute._make, run))
        for deployment_id, run in groupby(rows, key=itemgetter(0))
    }


def engine_requests_counted(
    deployment_ids: list[int], start: dt.datetime, end: dt.datetime
) -> dict[int, tuple[float, float]]:
    """Per deployment, the requests its engine's raw samples in (start, end] counted and the
    seconds they were counted over: the live traffic, before any minute is rolled up."""
    rows = _tuples(
        """
        SELECT deployment_id, sum(requests ORDER BY ts, batch_id)::float8,
               sum(requests_window_s ORDER BY ts, batch_id)::float8
        FROM inventory_engine_samples(%s, %s)
        WHERE deployment_id = ANY(%s) AND ts > %s AND ts <= %s AND requests_window_s > 0
        GROUP BY deployment_id
        """,
        [start, end, deployment_ids, start, end],
    )
    return {deployment_id: (requests, seconds) for deployment_id, requests, seconds in rows}


def _engine_packs(
    deployment_ids: list[int], start: dt.datetime, end: dt.datetime, *figures: str
) -> dict[int, tuple[np.ndarray, ...]]:
    """Per deployment with minutes in (start, end]: their epoch microseconds and `figures`
    (columns of `inventory_engine_minutes_1h`, NaN where a minute has none), oldest first,
    from the hourly packs of the engine's minute rollups."""
    if not deployment_ids:
        return {}
    # The column names come from the callers below, never from a request.
    columns = "".join(f", string_agg({figure}, ''::bytea ORDER BY bucket)" for figure in figures)
    rows = _tuples(
        f"""
        SELECT deployment_id, string_agg(at_us, ''::bytea ORDER BY bucket){columns}
        FROM inventory_engine_minutes_1h
        WHERE deployment_id = ANY(%s) AND bucket > %s AND bucket <= %s
        GROUP BY deployment_id
        """,
        [deployment_ids, start - dt.timedelta(hours=1), end],
    )
    answer = {}
    for deployment_id, packed_at, *packed in rows:
        at_us = _unpack(packed_at, ">i8")
        inside = _inside(at_us, start, end)
        if inside.any():
            answer[deployment_id] = (
                at_us[inside],
                *(_unpack(figure, ">f8")[inside] for figure in packed),
            )
    return answer


def running_peaks(
    deployment_ids: list[int], start: dt.datetime, end: dt.datetime
) -> dict[int, np.ndarray]:
    """Per deployment, the peaks of running requests of its engine's minutes in (start, end],
    oldest first, minutes without one left out (a deployment without any too): `engine_minutes`'
    `running_max` as a float array, the one column the KV advice reads (its mean, P95, peak and
    excursions).

    From the hourly packs: a week is ten thousand minutes, and rows cost the database, the
    driver and Python many times what one packed value does.
    """
    answer = {}
    for deployment_id, (_, running) in _engine_packs(
        deployment_ids, start, end, "running_max"
    ).items():
        peaks = running[~np.isnan(running)]
        if len(peaks):
            answer[deployment_id] = peaks
    return answer


def load_and_latency(
    deployment_ids: list[int], start: dt.datetime, end: dt.datetime
) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per deployment, what the interference analysis reads of `engine_minutes`: its minutes'
    epoch seconds, peaks of running requests and P99 latency peaks in (start, end], three
    float arrays in the same order (oldest first), a figure NaN where the minute has none.

    From the hourly packs: two days of a shared host's minutes are tens of thousands of rows.
    """
    return {
        deployment_id: (at_us / 1e6, running, latency)
        for deployment_id, (at_us, running, latency) in _engine_packs(
            deployment_ids, start, end, "running_max", "latency_p99_max"
        ).items()
    }


def running_percentile(
    deployment_ids: list[int], start: dt.datetime, end: dt.datetime, pct: int
) -> dict[int, float]:
    """Per deployment, `percentile(pct)` of the minutes' peaks of running requests in
    (start, end] (the minutes `engine_minutes` returns), without fetching every minute.

    The database ranks the peaks and returns the two the definition in
    `inventory.analytics.stats` interpolates between, so the figure is the very number that
    `percentile` gives over the full list (PostgreSQL's percentile_cont multiplies by a
    binary 0.95 and can differ in the last bits). `pct` is whole so that the ranks can be
    computed in integers on both sides.

    A window holding whole hours reads their blocks of counted peaks where they are built
    (inventory.timeseries.running_blocks: a week's P95 for every deployment at each scrape).
    """
    from_blocks = running_blocks.running_percentile(deployment_ids, start, end, pct)
    if from_blocks is not None:
        return from_blocks
    rows = _rows(
        """
        SELECT deployment_id, n, i, running_max FROM (
            SELECT deployment_id, running_max,
                   row_number() OVER (PARTITION BY deployment_id ORDER BY running_max) - 1 AS i,
                   count(*) OVER (PARTITION BY deployment_id) AS n
            FROM inventory_engine_rollups_1m(%s, %s)
            WHERE deployment_id = ANY(%s) AND bucket > %s AND bucket <= %s
              AND running_max IS NOT NULL
        ) ranked
        WHERE i IN ((n - 1) * %s / 100, least((n - 1) * %s / 100 + 1, n - 1))
        """,
        [start, end, deployment_ids, start, end, int(pct), int(pct)],
    )
    ranked: dict[int, tuple[int, dict[int, float]]] = {}
    for row in rows:
        ranked.setdefault(row["deployment_id"], (row["n"], {}))[1][row["i"]] = row["running_max"]
    answer = {}
    for deployment_id, (count, values) in ranked.items():
        below, above = percentile_ranks(count, pct)
        answer[deployment_id] = interpolate_percentile(count, pct, values[below], values[above])
    return answer


# Not frozen: a fleet's board builds one per card (8,000 for 1,000 hosts), and a frozen
# dataclass's __init__ costs several times a plain one's.
@dataclass(slots=True)
class CardPeaks:
    """A card's highest figures over a recent window, from the hourly rollups."""

    host_id: int
    host: str
    gpu_id: int
    index: int
    total_bytes: int  # the card's memory, as the inventory knows it
    driver_reserved_bytes: int | None
    used_peak_bytes: int | None  # None: no rollup in the window
    fragmentation_index_peak: float | None


def card_peaks(host_ids: list[int], start: dt.datetime, end: dt.datetime) -> list[CardPeaks]:
    """Every card of these hosts with its peaks over the hourly buckets that start in
    (start, end]: one query for a whole fleet, so the board and /metrics stay fast."""
    rows = _tuples(
        """
        SELECT g.host_id, h.name AS host, g.id AS gpu_id, g.index,
               g.memory_total_bytes AS total_bytes, r.reserved AS driver_reserved_bytes,
               r.used AS used_peak_bytes, r.frag AS fragmentation_index_peak
        FROM inventory_gpu g
        JOIN inventory_host h ON h.id = g.host_id
        LEFT JOIN (
            SELECT gpu_id, max(reserved_max) AS reserved, max(used_max) AS used,
                   max(frag_index_max) AS frag
            FROM inventory_card_rollup_1h WHERE bucket > %s AND bucket <= %s GROUP BY gpu_id
        ) r ON r.gpu_id = g.id
        WHERE g.host_id = ANY(%s)
        ORDER BY g.host_id, g.index
        """,
        [start, end, host_ids],
    )
    return [CardPeaks(*row) for row in rows]


_EVENT_OWNERS = {"host": "host_id", "gpu": "gpu_id"}


def event_counts(
    kind: str, by: str, ids: list[int], start: dt.datetime, end: dt.datetime
) -> dict[int, int]:
    """Events of one kind per host (or card) id with `start <= at <= end`; ids without any
    are left out. The ids go as one array, not as an IN list of a thousand placeholders for
    Django to build and the driver to split on every refresh of the board."""
    column = _EVENT_OWNERS[by]  # from a fixed mapping, never from the request
    rows = _rows(
        f"""
        SELECT {column} AS owner, count(*) AS n FROM inventory_event
        WHERE kind = %s AND {column} = ANY(%s) AND at >= %s AND at <= %s
        GROUP BY {column}
        """,
        [kind, ids, start, end],
    )
    return {row["owner"]: row["n"] for row in rows}


class EventTotal(NamedTuple):
    """How many events of one kind (and Xid code) a card, or a MIG GPU instance of it, has had
    since the console began: the rows behind /metrics' counters."""

    host: str
    gpu_index: int | None  # None: an event the host reported without a card
    uuid: str
    product_name: str
    gpu_id: int | None
    kind: str
    xid: int | None
    gpu_instance_id: int | None  # the MIG GPU instance the event names; None: the whole card
    count: int


def event_totals(kinds: list[str], host_ids: list[int]) -> list[EventTotal]:
    """Every stored event of these kinds counted per card, Xid code and MIG GPU instance.

    Events are never aged out and only ever added, so each count only grows: a counter. The
    GPU instance is the one the event itself names (NVML's Xid event data); a deployment's
    current slice is not used, as moving a deployment would move its past events."""
    rows = _tuples(
        """
        SELECT h.name, g.index, coalesce(g.uuid, ''), coalesce(g.product_name, ''), g.id,
               e.kind, e.xid, (e.detail->>'gpu_instance_id')::int AS gi, count(*)
        FROM inventory_event e
        JOIN inventory_host h ON h.id = e.host_id
        LEFT JOIN inventory_gpu g ON g.id = e.gpu_id
        WHERE e.kind = ANY(%s) AND e.host_id = ANY(%s)
        GROUP BY h.name, g.index, g.uuid, g.product_name, g.id, e.kind, e.xid, gi
        ORDER BY h.name, g.index, e.kind, e.xid, gi
        """,
        [kinds, host_ids],
    )
    return [EventTotal(*row) for row in rows]


def latency_p99_peaks(host_ids: list[int], start: dt.datetime, end: dt.datetime) -> list[dict]:
    """Per host and served model running there: the highest P99 latency (s) over the hourly
    buckets in (start, end], beside the model's SLO (ms)."""
    return _rows(
        """
        SELECT d.host_id, m.name, max(e.latency_p99_max) AS p99_s,
               m.p99_latency_slo_ms AS slo_ms
        FROM inventory_engine_rollup_1h e
        JOIN inventory_deployment d ON d.id = e.deployment_id
        JOIN inventory_servedmodel m ON m.id = d.served_model_id
        WHERE d.host_id = ANY(%s) AND e.bucket > %s AND e.bucket <= %s AND d.status <> 'stopped'
        GROUP BY d.host_id, m.name, m.p99_latency_slo_ms
        """,
        [host_ids, start, end],
    )


_ENGINE_ROLLUPS = {
    "minute": "inventory_engine_rollups_1m(%(start)s, %(end)s)",
    "hour": "inventory_engine_rollup_1h",
}


def latency_p99_series(
    deployment_ids: list[int], start: dt.datetime, end: dt.datetime, step_s: int
) -> list[dict]:
    """Per deployment, its engine's highest P50, P95 and P99 latency (s) in each step of
    (start, end], on whole steps since the epoch; hourly rollups for steps of an hour or more."""
    table = _ENGINE_ROLLUPS["hour" if step_s >= 3600 else "minute"]
    return _rows(
        f"""
        SELECT deployment_id,
               %(epoch)s::timestamptz
                   + floor(extract(epoch FROM bucket - %(epoch)s::timestamptz) / %(step_s)s)
                   * make_interval(secs => %(step_s)s) AS ts,
               max(latency_p50_max) AS p50_s, max(latency_p95_max) AS p95_s,
               max(latency_p99_max) AS p99_s
        FROM {table}
        WHERE deployment_id = ANY(%(deployment_ids)s) AND bucket > %(start)s AND bucket <= %(end)s
              AND latency_p99_max IS NOT NULL
        GROUP BY deployment_id, ts ORDER BY deployment_id, ts
        """,  # the table name comes from a fixed mapping, never from the request
        {
            "epoch": EPOCH,
            "step_s": step_s,
            "deployment_ids": deployment_ids,
            "start": start,
            "end": end,
        },
    )


def card_used_samples(gpu_ids: list[int], start: dt.datetime, end: dt.datetime) -> list[dict]:
    """Every raw sample of these cards in [start, end], oldest first: gpu_id, epoch seconds
    and the interval's highest used memory (a load test's peaks, in time order)."""
    if not gpu_ids:
        return []
    return _rows(
        """
        SELECT gpu_id, extract(epoch FROM ts)::float8 AS at, used_max
        FROM inventory_card_samples(%s, %s)
        WHERE gpu_id = ANY(%s) AND ts >= %s AND ts <= %s AND used_max IS NOT NULL
        ORDER BY ts, gpu_id
        """,
        [start, end, gpu_ids, start, end],
    )


def newest_card_sample_at(gpu_ids: list[int]) -> dict[int, dt.datetime]:
    """Per card, the time of its newest raw sample (has the flush covering a moment come?)."""
    if not gpu_ids:
        return {}
    rows = _rows(
        """
        SELECT g.id AS gpu_id, s.ts
        FROM unnest(%s::bigint[]) AS g(id)
        CROSS JOIN LATERAL (
            SELECT ts FROM inventory_card_sample_newest(g.id, '-infinity', 'infinity', true)
        ) s
        """,
        [gpu_ids],
    )
    return {row["gpu_id"]: row["ts"] for row in rows}
