"""Write a group's sample rows: binary COPY straight into the partitioned sample tables.

Rollups are not touched here: the minutes the group's samples fall in are marked dirty, and
inventory.timeseries.rollups folds them in shortly after (inventory.refresh_rollups). Ingest
stays a handful of COPYs however many rows it carries, and a late batch (a backfill after a
broker outage) re-dirties its minutes instead of having to merge into finished rollups.
"""

import datetime as dt
import uuid
from collections.abc import Iterable

from django.db import connection

CARD_COLUMNS = (
    "gpu_id", "ts", "batch_id", "interval_s", "samples", "lost", "total_bytes", "used_max",
    "used_last", "reserved_last", "free_min", "free_last", "util_gpu_max", "util_gpu_last",
    "util_memory_max", "frag_index_max",
)  # fmt: skip
PROCESS_COLUMNS = (
    "gpu_id", "ts", "batch_id", "pid", "kind", "name", "deployment_id", "mig_slice_id",
    "used_max", "used_last", "samples", "alloc_reserved_last", "alloc_allocated_last",
    "alloc_inactive_split_last", "alloc_largest_free_last", "frag_index_max",
)  # fmt: skip
ENGINE_COLUMNS = (
    "deployment_id", "ts", "batch_id", "kv_usage_max", "kv_usage_last", "running_max",
    "running_last", "waiting_max", "waiting_last", "vram_bytes_max", "requests",
    "requests_window_s", "latency_p50_s", "latency_p95_s", "latency_p99_s", "kv_pool_tokens",
    "kv_pool_bytes", "memory_fraction",
)  # fmt: skip
MIG_COLUMNS = ("mig_slice_id", "ts", "batch_id", "total_bytes", "used_max", "used_last", "free_min")

# Binary COPY: no text formatting on either side. The types follow the tables' columns.
CARD_TYPES = ("int8", "timestamptz", "uuid", "float4", "int2", "bool", "int8", "int8", "int8",
              "int8", "int8", "int8", "int2", "int2", "int2", "float4")  # fmt: skip
PROCESS_TYPES = ("int8", "timestamptz", "uuid", "int4", "varchar", "text", "int8", "int8", "int8",
                 "int8", "int2", "int8", "int8", "int8", "int8", "float4")  # fmt: skip
ENGINE_TYPES = ("int8", "timestamptz", "uuid", "float4", "float4", "float4", "float4", "float4",
                "float4", "int8", "float4", "float4", "float4", "float4", "float4", "int8",
                "int8", "float4")  # fmt: skip
MIG_TYPES = ("int8", "timestamptz", "uuid", "int8", "int8", "int8", "int8")

_OTHER_TABLES = (
    ("inventory_card_sample", CARD_COLUMNS, CARD_TYPES),
    ("inventory_engine_sample", ENGINE_COLUMNS, ENGINE_TYPES),
    ("inventory_mig_sample", MIG_COLUMNS, MIG_TYPES),
)


def write_processes(rows: Iterable[tuple]) -> None:
    """COPY process rows as they come: from a generator that checks and builds them batch by
    batch, PostgreSQL takes in one batch's rows while the next is made. Call inside the
    group's transaction, before write()."""
    with connection.cursor() as wrapper:
        _copy(wrapper.cursor, "inventory_process_sample", PROCESS_COLUMNS, PROCESS_TYPES, rows)


def write(
    card_rows, engine_rows, mig_rows, written: set[tuple[dt.datetime, int, uuid.UUID]]
) -> None:
    """Write one group's other rows (an iterable of tuples each, or None where a table has
    none) and mark dirty the minute of each (moment, host id, batch id) in `written`: a late
    batch then has only its own host's rollups recomputed, and a batch of the minute being
    filled is folded into its minute's card and process rows alone. Call inside the group's
    transaction."""
    with connection.cursor() as wrapper:
        cursor = wrapper.cursor  # the psycopg cursor, for COPY
        for (table, columns, types), rows in zip(
            _OTHER_TABLES, (card_rows, engine_rows, mig_rows), strict=True
        ):
            if rows is not None:
                _copy(cursor, table, columns, types, rows)
        # Never merged with a mark already there: that one may be the one a running refresh
        # has read, and deletes when it ends (inventory.timeseries.rollups).
        moments, hosts, batches = zip(*sorted(written), strict=True) if written else ((), (), ())
        cursor.execute(
            "INSERT INTO inventory_rollup_dirty (bucket, host_id, batch_id) "
            "SELECT date_trunc('minute', t, 'UTC'), h, b "
            "FROM unnest(%s::timestamptz[], %s::bigint[], %s::uuid[]) m (t, h, b)",
            [list(moments), list(hosts), list(batches)],
        )


def _copy(cursor, table: str, columns: tuple, types: tuple, rows: Iterable[tuple]) -> None:
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row(row)
