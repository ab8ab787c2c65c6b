"""The samples host operations read: who is on a card now, and the history the off-peak
planner works from (hourly load per host, daily fragmentation peaks per card)."""

from __future__ import annotations

import datetime as dt

from django.db import connection, transaction

from inventory.timeseries.queries import _rows


def process_pids_since(gpu_id: int, since: dt.datetime) -> dict[int, list[int]]:
    """Deployment id -> the PIDs its processes had on the card in samples after `since`."""
    rows = _rows(
        """
        SELECT deployment_id, pid, max(ts) AS ts FROM inventory_process_samples(%s, 'infinity')
        WHERE gpu_id = %s AND ts > %s AND deployment_id IS NOT NULL
        GROUP BY deployment_id, pid ORDER BY max(ts) DESC
        """,
        [since, gpu_id, since],
    )
    pids: dict[int, list[int]] = {}
    for row in rows:
        pids.setdefault(row["deployment_id"], []).append(row["pid"])
    return pids


def allocator_now(gpu_ids: list[int], since: dt.datetime) -> list[dict]:
    """Per card and deployment, from its newest process sample after `since` (a process
    that was replaced no longer counts): the allocator's reserve (reserved minus allocated),
    the fragmentation index, and the PID."""
    if not gpu_ids:
        return []
    return _rows(
        """
        SELECT DISTINCT ON (gpu_id, deployment_id) gpu_id, deployment_id, pid, ts,
               greatest(alloc_reserved_last - alloc_allocated_last, 0) AS reserve,
               frag_index_max AS fragmentation
        FROM inventory_process_samples(%s, 'infinity')
        WHERE gpu_id = ANY(%s) AND ts > %s AND deployment_id IS NOT NULL
        ORDER BY gpu_id, deployment_id, ts DESC, pid DESC
        """,  # two processes of a deployment in one sample: the same one every time
        [since, gpu_ids, since],
    )


def _without_jit(sql: str, params: list) -> list[dict]:
    # Compiling these scans costs seconds and gains nothing: each runs once an hour.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")
        cursor.execute(sql, params)
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def weekly_host_load(host_ids: list[int], start: dt.datetime, end: dt.datetime) -> list[dict]:
    """Per host and hour of the week (0 = Monday 00:00 UTC): the mean GPU utilisation over
    its cards and the weeks in the window, from the hourly rollups (the traffic it served)."""
    return _without_jit(
        """
        SELECT g.host_id, ((extract(epoch FROM r.bucket)::bigint / 3600 + 72) %% 168)::int
                   AS slot,
               sum(r.util_gpu_sum)::float8 / nullif(sum(r.util_gpu_count), 0) AS load
        FROM inventory_card_rollup_1h r JOIN inventory_gpu g ON g.id = r.gpu_id
        WHERE g.host_id = ANY(%s) AND r.bucket >= %s AND r.bucket < %s
        GROUP BY 1, 2
        """,
        [host_ids, start, end],
    )


def daily_fragmentation_peaks(
    host_ids: list[int], start: dt.datetime, end: dt.datetime
) -> list[dict]:
    """Per card and UTC day (days since the epoch): the highest fragmentation index of the
    hourly rollups."""
    return _without_jit(
        """
        SELECT r.gpu_id, (extract(epoch FROM r.bucket)::bigint / 86400)::int AS day,
               max(r.frag_index_max)::float8 AS fragmentation
        FROM inventory_card_rollup_1h r JOIN inventory_gpu g ON g.id = r.gpu_id
        WHERE g.host_id = ANY(%s) AND r.bucket >= %s AND r.bucket < %s
        GROUP BY 1, 2
        """,
        [host_ids, start, end],
    )
