"""Time-partitioned sample and rollup tables.

Samples are partitioned by day (dropped after the raw retention), 1-minute rollups by day and
1-hour rollups by month. Partitions themselves are created ahead of time and on demand by
inventory.timeseries.partitions. No foreign keys: a dropped partition must never cascade, and
ingest must not pay for a lookup per row.
"""

from django.db import migrations

CREATE = """
CREATE TABLE inventory_card_sample (
    gpu_id bigint NOT NULL,
    ts timestamptz NOT NULL,
    batch_id uuid NOT NULL,
    interval_s real NOT NULL,
    samples smallint NOT NULL,
    lost boolean NOT NULL DEFAULT false,
    total_bytes bigint,
    used_max bigint,
    used_last bigint,
    reserved_last bigint,
    free_min bigint,
    free_last bigint,
    util_gpu_max smallint,
    util_gpu_last smallint,
    util_memory_max smallint,
    frag_index_max real
) PARTITION BY RANGE (ts);
CREATE INDEX inventory_card_sample_gpu_ts ON inventory_card_sample (gpu_id, ts);

CREATE TABLE inventory_process_sample (
    gpu_id bigint NOT NULL,
    ts timestamptz NOT NULL,
    batch_id uuid NOT NULL,
    pid integer NOT NULL,
    kind varchar(8) NOT NULL,
    name text,
    deployment_id bigint,
    mig_slice_id bigint,
    used_max bigint,
    used_last bigint,
    samples smallint NOT NULL,
    alloc_reserved_last bigint,
    alloc_allocated_last bigint,
    alloc_inactive_split_last bigint,
    alloc_largest_free_last bigint,
    frag_index_max real
) PARTITION BY RANGE (ts);
CREATE INDEX inventory_process_sample_gpu_ts ON inventory_process_sample (gpu_id, ts);
CREATE INDEX inventory_process_sample_deployment_ts
    ON inventory_process_sample (deployment_id, ts) WHERE deployment_id IS NOT NULL;

CREATE TABLE inventory_engine_sample (
    deployment_id bigint NOT NULL,
    ts timestamptz NOT NULL,
    batch_id uuid NOT NULL,
    kv_usage_max real,
    kv_usage_last real,
    running_max real,
    running_last real,
    waiting_max real,
    waiting_last real,
    vram_bytes_max bigint,
    requests real,
    latency_p50_s real,
    latency_p95_s real,
    latency_p99_s real
) PARTITION BY RANGE (ts);
CREATE INDEX inventory_engine_sample_deployment_ts ON inventory_engine_sample (deployment_id, ts);

CREATE TABLE inventory_mig_sample (
    mig_slice_id bigint NOT NULL,
    ts timestamptz NOT NULL,
    batch_id uuid NOT NULL,
    total_bytes bigint,
    used_max bigint,
    used_last bigint,
    free_min bigint
) PARTITION BY RANGE (ts);
CREATE INDEX inventory_mig_sample_slice_ts ON inventory_mig_sample (mig_slice_id, ts);
"""

ROLLUP = """
CREATE TABLE inventory_card_rollup_{r} (
    gpu_id bigint NOT NULL,
    bucket timestamptz NOT NULL,
    samples integer NOT NULL,
    lost boolean NOT NULL DEFAULT false,
    total_bytes bigint,
    used_max bigint,
    used_sum numeric NOT NULL DEFAULT 0,
    used_count integer NOT NULL DEFAULT 0,
    reserved_max bigint,
    free_min bigint,
    util_gpu_max smallint,
    util_gpu_sum bigint NOT NULL DEFAULT 0,
    util_gpu_count integer NOT NULL DEFAULT 0,
    frag_index_max real,
    PRIMARY KEY (gpu_id, bucket)
) PARTITION BY RANGE (bucket);

CREATE TABLE inventory_process_rollup_{r} (
    gpu_id bigint NOT NULL,
    pid integer NOT NULL,
    bucket timestamptz NOT NULL,
    deployment_id bigint,
    name text,
    samples integer NOT NULL,
    used_max bigint,
    used_sum numeric NOT NULL DEFAULT 0,
    used_count integer NOT NULL DEFAULT 0,
    frag_index_max real,
    PRIMARY KEY (gpu_id, pid, bucket)
) PARTITION BY RANGE (bucket);
CREATE INDEX inventory_process_rollup_{r}_deployment
    ON inventory_process_rollup_{r} (deployment_id, bucket) WHERE deployment_id IS NOT NULL;

CREATE TABLE inventory_engine_rollup_{r} (
    deployment_id bigint NOT NULL,
    bucket timestamptz NOT NULL,
    samples integer NOT NULL,
    running_max real,
    running_sum double precision NOT NULL DEFAULT 0,
    running_count integer NOT NULL DEFAULT 0,
    waiting_max real,
    kv_usage_max real,
    requests double precision NOT NULL DEFAULT 0,
    latency_p95_max real,
    latency_p99_max real,
    PRIMARY KEY (deployment_id, bucket)
) PARTITION BY RANGE (bucket);
"""

TABLES = [
    "inventory_card_sample",
    "inventory_process_sample",
    "inventory_engine_sample",
    "inventory_mig_sample",
    *(
        f"inventory_{kind}_rollup_{r}"
        for kind in ("card", "process", "engine")
        for r in ("1m", "1h")
    ),
]


class Migration(migrations.Migration):
    dependencies = [("inventory", "0002_telemetry")]

    operations = [
        migrations.RunSQL(
            CREATE + ROLLUP.format(r="1m") + ROLLUP.format(r="1h"),
            reverse_sql="".join(f"DROP TABLE IF EXISTS {table} CASCADE;\n" for table in TABLES),
        )
    ]
