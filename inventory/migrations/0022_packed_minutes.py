"""An hour of the minute rollups' figures that the host page's analyses read, packed in one row.

The analyses (co-peaks, KV advice, interference) read a week of minutes a card or deployment:
as rows of the minute rollups that is tens of thousands of rows for one shared host, most of
the fragment's time. Packed an hour a row (see inventory.timeseries.rollups), the same figures
are a few thousand rows. Partitioned by day like the minute rollups, and kept as long as they
are; existing minute rollups of the analyses' longest window are packed here once.
"""

import datetime as dt

from django.db import migrations
from django.utils import timezone

CREATE = """
CREATE TABLE inventory_memory_minutes_1h (
    gpu_id bigint NOT NULL,
    deployment_id bigint NOT NULL,
    bucket timestamptz NOT NULL,
    minutes smallint NOT NULL,
    at_us bytea NOT NULL,
    used_max bytea NOT NULL,
    PRIMARY KEY (gpu_id, bucket, deployment_id)
) PARTITION BY RANGE (bucket);
CREATE INDEX inventory_memory_minutes_1h_bucket ON inventory_memory_minutes_1h (bucket);

CREATE TABLE inventory_engine_minutes_1h (
    deployment_id bigint NOT NULL,
    bucket timestamptz NOT NULL,
    minutes smallint NOT NULL,
    at_us bytea NOT NULL,
    running_max bytea NOT NULL,
    latency_p99_max bytea NOT NULL,
    PRIMARY KEY (deployment_id, bucket)
) PARTITION BY RANGE (bucket);
CREATE INDEX inventory_engine_minutes_1h_bucket ON inventory_engine_minutes_1h (bucket);
"""
DROP = """
DROP TABLE IF EXISTS inventory_memory_minutes_1h CASCADE;
DROP TABLE IF EXISTS inventory_engine_minutes_1h CASCADE;
"""
# The longest window an analysis reads (a week) and its first, partial hour.
BACKFILL = dt.timedelta(days=7, hours=1)
# Frozen here as the rollup refresh packs them today (inventory.timeseries.rollups), so that
# this migration does not change when that module does.
PACK = (
    """
INSERT INTO inventory_memory_minutes_1h
SELECT gpu_id, deployment_id, date_trunc('hour', bucket, 'UTC'), count(*),
    string_agg(int8send((extract(epoch FROM bucket) * 1000000)::bigint), ''::bytea
               ORDER BY bucket),
    string_agg(int8send(used_max), ''::bytea ORDER BY bucket)
FROM (
    SELECT gpu_id, deployment_id, bucket, max(used_max) AS used_max
    FROM inventory_process_rollup_1m
    WHERE bucket >= %(first)s AND bucket < %(last)s
      AND deployment_id IS NOT NULL AND used_max IS NOT NULL
    GROUP BY 1, 2, 3
) minutes
GROUP BY 1, 2, 3
""",
    """
INSERT INTO inventory_engine_minutes_1h
SELECT deployment_id, date_trunc('hour', bucket, 'UTC'), count(*),
    string_agg(int8send((extract(epoch FROM bucket) * 1000000)::bigint), ''::bytea
               ORDER BY bucket),
    string_agg(float8send(coalesce(running_max::text::float8, 'NaN')), ''::bytea
               ORDER BY bucket),
    string_agg(float8send(coalesce(latency_p99_max::text::float8, 'NaN')), ''::bytea
               ORDER BY bucket)
FROM inventory_engine_rollup_1m
WHERE bucket >= %(first)s AND bucket < %(last)s
GROUP BY 1, 2
""",
)


def pack_recent_minutes(apps, schema_editor):
    now = timezone.now()
    first = (now - BACKFILL).astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    with schema_editor.connection.cursor() as cursor:
        day = first.replace(hour=0)
        while day <= now:
            for table in ("inventory_memory_minutes_1h", "inventory_engine_minutes_1h"):
                cursor.execute(
                    f"CREATE TABLE IF NOT EXISTS {table}_p{day:%Y%m%d} PARTITION OF {table} "
                    "FOR VALUES FROM (%s) TO (%s)",
                    [day, day + dt.timedelta(days=1)],
                )
            day += dt.timedelta(days=1)
        # Up to the end of the last day partitioned here: anything later waits for a refresh.
        for statement in PACK:
            cursor.execute(statement, {"first": first, "last": day})


class Migration(migrations.Migration):
    dependencies = [("inventory", "0021_dead_letter_reason_message")]

    operations = [
        migrations.RunSQL(CREATE, reverse_sql=DROP),
        migrations.RunPython(pack_recent_minutes, migrations.RunPython.noop),
    ]
