"""Range partitions of the sample and rollup tables: created ahead and on demand, dropped whole.

Dropping a partition is how old telemetry leaves: no DELETE, no vacuum debt.
"""

import datetime as dt
import re
from dataclasses import dataclass
from typing import Literal

from django.conf import settings
from django.db import connection, transaction

Period = Literal["day", "month"]


@dataclass(frozen=True)
class PartitionedTable:
    name: str
    period: Period
    retention_setting: str
    # Below 100 where rows are rewritten in place and often: each page keeps room for their
    # next versions, so an update stays on its page (HOT) and writes no index entry.
    fillfactor: int = 100

    @property
    def retention(self) -> dt.timedelta:
        return dt.timedelta(days=getattr(settings, self.retention_setting))

    def bounds(self, moment: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
        moment = moment.astimezone(dt.UTC)
        if self.period == "day":
            start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
            return start, start + dt.timedelta(days=1)
        start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = (start + dt.timedelta(days=32)).replace(day=1)
        return start, end

    def partition_name(self, start: dt.datetime) -> str:
        suffix = start.strftime("%Y%m%d" if self.period == "day" else "%Y%m")
        return f"{self.name}_p{suffix}"


RAW = "TELEMETRY_RAW_RETENTION_DAYS"
MINUTE = "TELEMETRY_1M_RETENTION_DAYS"
HOUR = "TELEMETRY_1H_RETENTION_DAYS"
# Room on each page for a second version of every row.
MINUTE_FILLFACTOR = 50

TABLES = (
    PartitionedTable("inventory_card_sample", "day", RAW),
    PartitionedTable("inventory_process_sample", "day", RAW),
    PartitionedTable("inventory_engine_sample", "day", RAW),
    PartitionedTable("inventory_mig_sample", "day", RAW),
    # The minute being filled is recomputed every refresh (inventory.timeseries.rollups), in
    # place; its rows leave for their packs once the hour is closed, and a day wholly packed
    # is truncated: the room costs disk only for the rows not yet packed.
    PartitionedTable("inventory_card_rollup_1m", "day", MINUTE, fillfactor=MINUTE_FILLFACTOR),
    PartitionedTable("inventory_process_rollup_1m", "day", MINUTE, fillfactor=MINUTE_FILLFACTOR),
    PartitionedTable("inventory_engine_rollup_1m", "day", MINUTE, fillfactor=MINUTE_FILLFACTOR),
    PartitionedTable("inventory_card_rollup_1h", "month", HOUR),
    PartitionedTable("inventory_process_rollup_1h", "month", HOUR),
    PartitionedTable("inventory_engine_rollup_1h", "month", HOUR),
    # The minute rollups' figures the analyses read, an hour a row: as long as the minutes.
    PartitionedTable("inventory_memory_minutes_1h", "day", MINUTE),
    PartitionedTable("inventory_engine_minutes_1h", "day", MINUTE),
    # The same rows an hour a row (inventory.timeseries.packing), kept as long as the rows.
    PartitionedTable("inventory_card_sample_pack", "day", RAW),
    PartitionedTable("inventory_process_sample_pack", "day", RAW),
    PartitionedTable("inventory_engine_sample_pack", "day", RAW),
    PartitionedTable("inventory_mig_sample_pack", "day", RAW),
    PartitionedTable("inventory_card_rollup_1m_pack", "day", MINUTE),
    PartitionedTable("inventory_process_rollup_1m_pack", "day", MINUTE),
    PartitionedTable("inventory_engine_rollup_1m_pack", "day", MINUTE),
)

_PARTITION = re.compile(r"_p(\d{6}|\d{8})$")
# Partitions this process knows exist; a cache, so ingest does not ask the catalogue per batch.
_known: set[str] = set()


def ensure_partitions(start: dt.datetime, end: dt.datetime) -> None:
    """Make sure every table has the partitions that [start, end] falls in."""
    with connection.cursor() as cursor:
        for table in TABLES:
            moment = table.bounds(start)[0]
            while moment <= end:
                lower, upper = table.bounds(moment)
                name = table.partition_name(lower)
                if name not in _known:
                    _create_partition(cursor, table, name, lower, upper)
                    _known.add(name)
                moment = upper


def _create_partition(cursor, table, name, lower, upper) -> None:
    # Several ingest workers may create the same partition at once, and IF NOT EXISTS does not
    # make that safe in PostgreSQL's catalogue; a transaction-scoped advisory lock does.
    with transaction.atomic(using=connection.alias):
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [name])
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {table.name} "
            f"FOR VALUES FROM (%s) TO (%s) WITH (fillfactor = {table.fillfactor:d})",
            [lower, upper],
        )


def existing_partitions(table: PartitionedTable) -> list[tuple[str, dt.datetime]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT child.relname FROM pg_inherits "
            "JOIN pg_class parent ON parent.oid = pg_inherits.inhparent "
            "JOIN pg_class child ON child.oid = pg_inherits.inhrelid "
            "WHERE parent.relname = %s ORDER BY child.relname",
            [table.name],
        )
        names = [row[0] for row in cursor.fetchall()]
    found = []
    for name in names:
        match = _PARTITION.search(name)
        if match:
            fmt = "%Y%m%d" if len(match.group(1)) == 8 else "%Y%m"
            found.append((name, dt.datetime.strptime(match.group(1), fmt).replace(tzinfo=dt.UTC)))
    return found


def drop_expired(now: dt.datetime) -> list[str]:
    """Drop every partition whose whole range is older than its table's retention."""
    dropped = []
    with connection.cursor() as cursor:
        for table in TABLES:
            cutoff = now - table.retention
            for name, lower in existing_partitions(table):
                if table.bounds(lower)[1] <= cutoff:
                    cursor.execute(f"DROP TABLE IF EXISTS {name}")
                    _known.discard(name)
                    dropped.append(name)
    return dropped


def forget_known() -> None:
    """Tests that drop partitions behind this process's back call this."""
    _known.clear()
