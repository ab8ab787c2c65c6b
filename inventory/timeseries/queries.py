"""Reading telemetry back: latest values, and series at a step, from the right resolution.

A series comes from raw samples, the 1-minute or the 1-hour rollup, whichever is the coarsest
table still finer than the step and still holding the start of the window. Every point keeps
the bucket's maximum (so a peak shows at any zoom) beside its mean; points are labelled by the
start of their step, counted in whole steps from the epoch.
"""

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.utils import timezone


@dataclass(frozen=True)
class Source:
    name: str  # "raw", "1m" or "1h"
    resolution_s: int
    card_table: str
    process_table: str
    engine_table: str


RAW = Source("raw", 0, "inventory_card_sample", "inventory_process_sample",
             "inventory_engine_sample")  # fmt: skip
MINUTE = Source("1m", 60, "inventory_card_rollup_1m", "inventory_process_rollup_1m",
                "inventory_engine_rollup_1m")  # fmt: skip
HOUR = Source("1h", 3600, "inventory_card_rollup_1h", "inventory_process_rollup_1h",
              "inventory_engine_rollup_1h")  # fmt: skip


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


def latest_card_samples(gpu_ids: list[int], within: dt.timedelta) -> dict[int, dict]:
    """The newest raw sample of each card, if it is not older than `within`."""
    if not gpu_ids:
        return {}
    rows = _rows(
        """
        SELECT g.id AS gpu_id, s.ts, s.total_bytes, s.used_max, s.used_last, s.reserved_last,
               s.free_min, s.free_last, s.util_gpu_last, s.lost, s.frag_index_max
        FROM unnest(%s::bigint[]) AS g(id)
        CROSS JOIN LATERAL (
            SELECT * FROM inventory_card_sample c
            WHERE c.gpu_id = g.id AND c.ts > %s
            ORDER BY c.ts DESC LIMIT 1
        ) s
        """,
        [gpu_ids, timezone.now() - within],
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


def card_series(
    gpu_ids: list[int], start: dt.datetime, end: dt.datetime, step_s: int, source: Source
) -> list[dict]:
    """One row per card and step: gpu_id, ts (bucket start) and the point's figures."""
    time_column = "ts" if source is RAW else "bucket"
    point = _CARD_POINT["raw" if source is RAW else "rollup"]
    return _rows(
        f"""
        SELECT gpu_id, date_bin(make_interval(secs => %s), {time_column}, %s) AS ts, {point}
        FROM {source.card_table}
        WHERE gpu_id = ANY(%s) AND {time_column} > %s AND {time_column} < %s
        GROUP BY 1, 2 ORDER BY 1, 2
        """,
        [step_s, EPOCH, gpu_ids, _window_start(start, source), end],
    )


def process_series(
    gpu_ids: list[int], start: dt.datetime, end: dt.datetime, step_s: int, source: Source
) -> list[dict]:
    """One row per card, process and step: the process's peak memory in the step."""
    time_column = "ts" if source is RAW else "bucket"
    return _rows(
        f"""
        SELECT gpu_id, pid, max(name) AS name, max(deployment_id) AS deployment_id,
               date_bin(make_interval(secs => %s), {time_column}, %s) AS ts,
               max(used_max) AS used_max, max(frag_index_max) AS frag_index_max
        FROM {source.process_table}
        WHERE gpu_id = ANY(%s) AND {time_column} > %s AND {time_column} < %s
        GROUP BY gpu_id, pid, 5 ORDER BY gpu_id, pid, 5
        """,
        [step_s, EPOCH, gpu_ids, _window_start(start, source), end],
    )


def latest_process_memory(gpu_ids: list[int], within: dt.timedelta) -> dict[tuple[int, int], int]:
    """Memory each deployment's processes hold on each card, from their newest samples."""
    if not gpu_ids:
        return {}
    rows = _rows(
        """
        SELECT DISTINCT ON (gpu_id, pid) gpu_id, deployment_id, used_last
        FROM inventory_process_sample
        WHERE gpu_id = ANY(%s) AND ts > %s AND deployment_id IS NOT NULL
          AND used_last IS NOT NULL
        ORDER BY gpu_id, pid, ts DESC
        """,
        [gpu_ids, timezone.now() - within],
    )
    held: dict[tuple[int, int], int] = {}
    for row in rows:
        key = (row["gpu_id"], row["deployment_id"])
        held[key] = held.get(key, 0) + row["used_last"]
    return held
