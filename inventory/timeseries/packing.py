"""Samples and minute rollups packed: an hour of a card (or deployment, or MIG device) in one row.

Ingest writes rows (binary COPY, inventory.ingest.samples) and the rollup refresh writes minute
rows, as before. Once an hour is closed, `inventory_hot_from()` has passed it (15 minutes into
the next hour) and the rollup refresh has marked it due, `pack` moves the hour's rows of each
key into one row of the table's `_pack` twin: the key, the hour, and one array a column, in one
total order, so that element i of every array is row i. PostgreSQL compresses the arrays
(lz4, TOAST): a figure that repeats every 10 s costs next to nothing, and the per-row header
and index entries are gone.

Readers never name the tables. Each has a SQL function of the same name in the plural
(`inventory_card_samples(lo, hi)`, `inventory_card_rollups_1m(lo, hi)`, ...) returning the
table's own row type: the rows, and the packs' elements unnested, for the span [lo, hi]. It is
inlined by the planner (a reader's own WHERE reaches both halves) and skips the packs
altogether when `lo` is at or after `inventory_hot_from()`: the newest interval is read as
rows, at once. Every reader therefore answers the same numbers, bit for bit, whatever is
packed (tests/inventory/timeseries/test_packing.py).

Late rows (a backfill after an outage) land as rows in an hour already packed; the next pack
folds them into the hour's pack. The rollup refresh rewrites a late minute's rollups: it first
moves the packed hours it is about to rewrite back into rows (`unpack_hours`).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

from django.db import OperationalError, connection, transaction
from django.utils import timezone

from inventory.timeseries import partitions

# The rollup refresh's pg_advisory_xact_lock key, arbitrary but fixed: "rollups" in ASCII.
# Packing minute rollups takes it too: the refresh rewrites minute rows, packing moves them.
REFRESH_LOCK = 0x726F6C6C757073
# pg_advisory_xact_lock key of a pack step, arbitrary but fixed: "packing" in ASCII.
PACK_LOCK = 0x7061636B696E67
# Keys (card, deployment or MIG device ids) a pack step takes at once: a step is one
# transaction of at most this many packs, whatever the backlog.
KEYS_PER_STEP = 2000


# inventory_hot_from() is the hour of now minus this: no row after it is ever packed.
HOT_AFTER = dt.timedelta(minutes=15)
# How far this process's clock may be from the database's.
CLOCK_MARGIN = dt.timedelta(minutes=1)


def packs_may_hold(after: dt.datetime) -> bool:
    """Whether a sample after `after` may already be packed: False for the newest interval
    (alerts, the watch), whose readers then skip the packs when the query is planned."""
    return after < timezone.now() - HOT_AFTER + CLOCK_MARGIN


@dataclass(frozen=True)
class PackedTable:
    table: str
    reader: str  # the SQL function readers call
    key: str  # the column a pack is one of
    time: str  # ts or bucket
    # Every column of the table but key and time, in the table's order, with its type.
    columns: tuple[tuple[str, str], ...]
    # Columns after `time` that make each row's place unique: the arrays' one order.
    order: tuple[str, ...]

    @property
    def pack(self) -> str:
        return f"{self.table}_pack"


_CARD = (
    ("batch_id", "uuid"), ("interval_s", "real"), ("samples", "smallint"), ("lost", "boolean"),
    ("total_bytes", "bigint"), ("used_max", "bigint"), ("used_last", "bigint"),
    ("reserved_last", "bigint"), ("free_min", "bigint"), ("free_last", "bigint"),
    ("util_gpu_max", "smallint"), ("util_gpu_last", "smallint"),
    ("util_memory_max", "smallint"), ("frag_index_max", "real"),
)  # fmt: skip
_PROCESS = (
    ("batch_id", "uuid"), ("pid", "integer"), ("kind", "varchar"), ("name", "text"),
    ("deployment_id", "bigint"), ("mig_slice_id", "bigint"), ("used_max", "bigint"),
    ("used_last", "bigint"), ("samples", "smallint"), ("alloc_reserved_last", "bigint"),
    ("alloc_allocated_last", "bigint"), ("alloc_inactive_split_last", "bigint"),
    ("alloc_largest_free_last", "bigint"), ("frag_index_max", "real"),
)  # fmt: skip
_ENGINE = (
    ("batch_id", "uuid"), ("kv_usage_max", "real"), ("kv_usage_last", "real"),
    ("running_max", "real"), ("running_last", "real"), ("waiting_max", "real"),
    ("waiting_last", "real"), ("vram_bytes_max", "bigint"), ("requests", "real"),
    ("latency_p50_s", "real"), ("latency_p95_s", "real"), ("latency_p99_s", "real"),
    ("kv_pool_tokens", "bigint"), ("kv_pool_bytes", "bigint"), ("memory_fraction", "real"),
    ("requests_window_s", "real"),
)  # fmt: skip
_MIG = (
    ("batch_id", "uuid"), ("total_bytes", "bigint"), ("used_max", "bigint"),
    ("used_last", "bigint"), ("free_min", "bigint"),
)  # fmt: skip
_CARD_1M = (
    ("samples", "integer"), ("lost", "boolean"), ("total_bytes", "bigint"),
    ("used_max", "bigint"), ("used_sum", "numeric"), ("used_count", "integer"),
    ("reserved_max", "bigint"), ("free_min", "bigint"), ("util_gpu_max", "smallint"),
    ("util_gpu_sum", "bigint"), ("util_gpu_count", "integer"), ("frag_index_max", "real"),
)  # fmt: skip
_PROCESS_1M = (
    ("pid", "integer"), ("deployment_id", "bigint"), ("name", "text"), ("samples", "integer"),
    ("used_max", "bigint"), ("used_sum", "numeric"), ("used_count", "integer"),
    ("frag_index_max", "real"),
)  # fmt: skip
_ENGINE_1M = (
    ("samples", "integer"), ("running_max", "real"), ("running_sum", "double precision"),
    ("running_count", "integer"), ("waiting_max", "real"), ("kv_usage_max", "real"),
    ("requests", "double precision"), ("latency_p95_max", "real"),
    ("latency_p99_max", "real"), ("latency_p50_max", "real"), ("requests_s", "real"),
)  # fmt: skip

CARD = PackedTable(
    "inventory_card_sample", "inventory_card_samples", "gpu_id", "ts", _CARD, ("batch_id",)
)
PROCESS = PackedTable(
    "inventory_process_sample", "inventory_process_samples", "gpu_id", "ts", _PROCESS,
    ("pid", "batch_id"),
)  # fmt: skip
ENGINE = PackedTable(
    "inventory_engine_sample", "inventory_engine_samples", "deployment_id", "ts", _ENGINE,
    ("batch_id",),
)  # fmt: skip
MIG = PackedTable(
    "inventory_mig_sample", "inventory_mig_samples", "mig_slice_id", "ts", _MIG, ("batch_id",)
)
CARD_1M = PackedTable(
    "inventory_card_rollup_1m", "inventory_card_rollups_1m", "gpu_id", "bucket", _CARD_1M, ()
)
PROCESS_1M = PackedTable(
    "inventory_process_rollup_1m", "inventory_process_rollups_1m", "gpu_id", "bucket",
    _PROCESS_1M, ("pid",),
)  # fmt: skip
ENGINE_1M = PackedTable(
    "inventory_engine_rollup_1m", "inventory_engine_rollups_1m", "deployment_id", "bucket",
    _ENGINE_1M, (),
)  # fmt: skip

RAW_TABLES = (CARD, PROCESS, ENGINE, MIG)
MINUTE_TABLES = (CARD_1M, PROCESS_1M, ENGINE_1M)
TABLES = RAW_TABLES + MINUTE_TABLES


def _names(table: PackedTable) -> list[str]:
    return [table.time] + [name for name, _ in table.columns]


def _order(table: PackedTable) -> str:
    return ", ".join((table.key, table.time, *table.order))


def _pack_sql(table: PackedTable) -> str:
    """One step: move the rows of hour %(hour)s of keys %(first)s..%(last)s into their packs,
    folding in the pack already there (late rows), in one statement."""
    names = _names(table)
    arrays = ", ".join(f"array_agg({name})" for name in names)
    unnested = ", ".join(f"f.{name}" for name in names)
    return f"""
WITH moved AS (
    DELETE FROM {table.table} r
    WHERE r.{table.key} BETWEEN %(first)s AND %(last)s
      AND r.{table.time} >= %(hour)s AND r.{table.time} < %(hour)s + interval '1 hour'
    RETURNING r.{table.key}, {", ".join(f"r.{name}" for name in names)}
), folded AS (
    DELETE FROM {table.pack} p
    WHERE p.{table.key} BETWEEN %(first)s AND %(last)s AND p.hour = %(hour)s
    RETURNING p.*
), every_row AS (
    SELECT * FROM moved
    UNION ALL
    SELECT f.{table.key}, u.*
    FROM folded f, unnest({unnested}) AS u({", ".join(names)})
)
INSERT INTO {table.pack} ({table.key}, hour, n, {", ".join(names)})
SELECT {table.key}, %(hour)s, count(*), {arrays}
FROM (SELECT * FROM every_row ORDER BY {_order(table)}) ordered
GROUP BY {table.key}
"""


@dataclass(frozen=True)
class Step:
    table: str
    hour: dt.datetime
    first_key: int
    packs: int


def mark_due(cursor, hours: list[dt.datetime]) -> None:
    """These hours received rows (the rollup refresh calls it for every hour it rolls up): pack
    them once they are closed. The version tells a pass that finished an hour from a late
    batch that came in meanwhile."""
    cursor.execute(
        "INSERT INTO inventory_pack_due (hour, version) SELECT unnest(%s::timestamptz[]), 1 "
        "ON CONFLICT (hour) DO UPDATE SET version = inventory_pack_due.version + 1",
        [hours],
    )


def _next_key(cursor, table: PackedTable, hour: dt.datetime, after: int | None) -> int | None:
    # The (key, time) index walks from `after` to the next key with a row in the hour; the
    # row tables hold about two hours, so little is skipped.
    cursor.execute(
        f"SELECT {table.key} FROM {table.table} "
        f"WHERE {table.key} > %s AND {table.time} >= %s AND {table.time} < %s "
        f"ORDER BY {table.key} LIMIT 1",
        [-1 if after is None else after, hour, hour + dt.timedelta(hours=1)],
    )
    row = cursor.fetchone()
    return row[0] if row else None


def pack_step(table: PackedTable, hour: dt.datetime, after: int | None = None) -> Step | None:
    """Pack `table`'s rows of `hour` for the next KEYS_PER_STEP keys (by id) after `after`, in
    one transaction; None when the hour has no rows left there."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PACK_LOCK])
        if table in MINUTE_TABLES:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [REFRESH_LOCK])
        first = _next_key(cursor, table, hour, after)
        if first is None:
            return None
        keys = {"hour": hour, "first": first, "last": first + KEYS_PER_STEP - 1}
        partitions.ensure_partitions(hour, hour)
        cursor.execute(_pack_sql(table), keys)
        return Step(table.table, hour, first, cursor.rowcount)


def pack_hour(hour: dt.datetime, deadline: float) -> list[Step] | None:
    """Every table's rows of `hour` into packs; None when the deadline came first."""
    steps = []
    for table in TABLES:
        after = None
        while step := pack_step(table, hour, after):
            steps.append(step)
            after = step.first_key + KEYS_PER_STEP - 1
            if time.monotonic() > deadline:
                return None
    return steps


def pack(budget_s: float = 45.0) -> list[Step]:
    """Pack the closed hours that are due, oldest first, until none is or `budget_s` is spent
    (the next run goes on where this one stopped: the keys packed have no rows left)."""
    steps: list[Step] = []
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT hour, version FROM inventory_pack_due WHERE hour < inventory_hot_from() "
                "ORDER BY hour LIMIT 1"
            )
            due = cursor.fetchone()
        if due is None:
            break
        hour, version = due
        done = pack_hour(hour, deadline)
        if done is None:
            break
        steps += done
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM inventory_pack_due WHERE hour = %s AND version = %s", [hour, version]
            )
    release_empty_days()
    return steps


def pack_all() -> list[Step]:
    """Pack every closed hour that is due, however long it takes (tests, the benchmarks)."""
    steps = []
    while True:
        steps += pack(budget_s=3600.0)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM inventory_pack_due WHERE hour < inventory_hot_from()")
            if cursor.fetchone() is None:
                return steps


def _unpack_sql(table: PackedTable) -> str:
    names = _names(table)
    return f"""
WITH unpacked AS (
    DELETE FROM {table.pack} p WHERE p.hour = ANY(%(hours)s) RETURNING p.*
)
INSERT INTO {table.table} ({table.key}, {", ".join(names)})
SELECT f.{table.key}, u.*
FROM unpacked f, unnest({", ".join(f"f.{name}" for name in names)}) AS u({", ".join(names)})
"""


def unpack_hours(cursor, tables: tuple[PackedTable, ...], hours: list[dt.datetime]) -> None:
    """Move these hours' packs of `tables` back into rows (in the caller's transaction): for a
    writer about to rewrite rows of an hour already packed."""
    for table in tables:
        cursor.execute(_unpack_sql(table), {"hours": hours})


def release_empty_days() -> list[str]:
    """Empty the row partitions of days wholly packed: a DELETE leaves the day's pages to
    vacuum, TRUNCATE hands them back. Only a partition that holds no row is truncated (its
    lock stops a COPY in between), never today's."""
    released = []
    with connection.cursor() as cursor:
        cursor.execute("SELECT inventory_hot_from()")
        hot_from = cursor.fetchone()[0]
        for spec in partitions.TABLES:
            if spec.name not in {table.table for table in TABLES}:
                continue
            for name, lower in partitions.existing_partitions(spec):
                if spec.bounds(lower)[1] > hot_from:
                    continue
                if _truncate_if_empty(cursor, name):
                    released.append(name)
    return released


def _truncate_if_empty(cursor, name: str) -> bool:
    cursor.execute(
        f"SELECT pg_relation_size(%s) > 0 AND NOT EXISTS (SELECT FROM {name} LIMIT 1)", [name]
    )
    if not cursor.fetchone()[0]:
        return False
    try:
        with transaction.atomic():
            # A writer holds it (a late COPY): leave it for the next pass rather than wait.
            cursor.execute(f"LOCK TABLE {name} IN ACCESS EXCLUSIVE MODE NOWAIT")
            cursor.execute(f"SELECT NOT EXISTS (SELECT FROM {name} LIMIT 1)")
            if not cursor.fetchone()[0]:
                return False
            cursor.execute(f"TRUNCATE {name}")
            return True
    except OperationalError:
        return False
