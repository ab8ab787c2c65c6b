"""Move one batch's rows into the sample tables and fold them into the rollups.

Rows are COPYed into temporary staging tables (no WAL, dropped at commit), then each target is
filled with one INSERT ... SELECT. Rollups merge with ON CONFLICT: maxima stay maxima, sums
and counts add up, so a bucket's figures do not depend on how batches were cut.
"""

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
    "latency_p50_s", "latency_p95_s", "latency_p99_s",
)  # fmt: skip
MIG_COLUMNS = ("mig_slice_id", "ts", "batch_id", "total_bytes", "used_max", "used_last", "free_min")

# Binary COPY: no text formatting on either side. The types follow the tables' columns.
CARD_TYPES = ("int8", "timestamptz", "uuid", "float4", "int2", "bool", "int8", "int8", "int8",
              "int8", "int8", "int8", "int2", "int2", "int2", "float4")  # fmt: skip
PROCESS_TYPES = ("int8", "timestamptz", "uuid", "int4", "varchar", "text", "int8", "int8", "int8",
                 "int8", "int2", "int8", "int8", "int8", "int8", "float4")  # fmt: skip
ENGINE_TYPES = ("int8", "timestamptz", "uuid", "float4", "float4", "float4", "float4", "float4",
                "float4", "int8", "float4", "float4", "float4", "float4")  # fmt: skip
MIG_TYPES = ("int8", "timestamptz", "uuid", "int8", "int8", "int8", "int8")

RESOLUTIONS = {"1m": "minute", "1h": "hour"}

CARD_ROLLUP = """
INSERT INTO inventory_card_rollup_{r} AS r (gpu_id, bucket, samples, lost, total_bytes, used_max,
    used_sum, used_count, reserved_max, free_min, util_gpu_max, util_gpu_sum, util_gpu_count,
    frag_index_max)
SELECT gpu_id, date_trunc('{unit}', ts, 'UTC'), count(*), bool_or(lost), max(total_bytes),
    max(used_max), coalesce(sum(used_last), 0), count(used_last), max(reserved_last),
    min(free_min), max(util_gpu_max), coalesce(sum(util_gpu_last), 0), count(util_gpu_last),
    max(frag_index_max)
FROM stage_card GROUP BY 1, 2
ON CONFLICT (gpu_id, bucket) DO UPDATE SET
    samples = r.samples + EXCLUDED.samples,
    lost = r.lost OR EXCLUDED.lost,
    total_bytes = GREATEST(r.total_bytes, EXCLUDED.total_bytes),
    used_max = GREATEST(r.used_max, EXCLUDED.used_max),
    used_sum = r.used_sum + EXCLUDED.used_sum,
    used_count = r.used_count + EXCLUDED.used_count,
    reserved_max = GREATEST(r.reserved_max, EXCLUDED.reserved_max),
    free_min = LEAST(r.free_min, EXCLUDED.free_min),
    util_gpu_max = GREATEST(r.util_gpu_max, EXCLUDED.util_gpu_max),
    util_gpu_sum = r.util_gpu_sum + EXCLUDED.util_gpu_sum,
    util_gpu_count = r.util_gpu_count + EXCLUDED.util_gpu_count,
    frag_index_max = GREATEST(r.frag_index_max, EXCLUDED.frag_index_max)
"""

PROCESS_ROLLUP = """
INSERT INTO inventory_process_rollup_{r} AS r (gpu_id, pid, bucket, deployment_id, name,
    samples, used_max, used_sum, used_count, frag_index_max)
SELECT gpu_id, pid, date_trunc('{unit}', ts, 'UTC'), max(deployment_id), max(name), count(*),
    max(used_max), coalesce(sum(used_last), 0), count(used_last), max(frag_index_max)
FROM stage_process GROUP BY 1, 2, 3
ON CONFLICT (gpu_id, pid, bucket) DO UPDATE SET
    deployment_id = COALESCE(EXCLUDED.deployment_id, r.deployment_id),
    name = COALESCE(EXCLUDED.name, r.name),
    samples = r.samples + EXCLUDED.samples,
    used_max = GREATEST(r.used_max, EXCLUDED.used_max),
    used_sum = r.used_sum + EXCLUDED.used_sum,
    used_count = r.used_count + EXCLUDED.used_count,
    frag_index_max = GREATEST(r.frag_index_max, EXCLUDED.frag_index_max)
"""

ENGINE_ROLLUP = """
INSERT INTO inventory_engine_rollup_{r} AS r (deployment_id, bucket, samples, running_max,
    running_sum, running_count, waiting_max, kv_usage_max, requests, latency_p95_max,
    latency_p99_max)
SELECT deployment_id, date_trunc('{unit}', ts, 'UTC'), count(*), max(running_max),
    coalesce(sum(running_last), 0), count(running_last), max(waiting_max), max(kv_usage_max),
    coalesce(sum(requests), 0), max(latency_p95_s), max(latency_p99_s)
FROM stage_engine GROUP BY 1, 2
ON CONFLICT (deployment_id, bucket) DO UPDATE SET
    samples = r.samples + EXCLUDED.samples,
    running_max = GREATEST(r.running_max, EXCLUDED.running_max),
    running_sum = r.running_sum + EXCLUDED.running_sum,
    running_count = r.running_count + EXCLUDED.running_count,
    waiting_max = GREATEST(r.waiting_max, EXCLUDED.waiting_max),
    kv_usage_max = GREATEST(r.kv_usage_max, EXCLUDED.kv_usage_max),
    requests = r.requests + EXCLUDED.requests,
    latency_p95_max = GREATEST(r.latency_p95_max, EXCLUDED.latency_p95_max),
    latency_p99_max = GREATEST(r.latency_p99_max, EXCLUDED.latency_p99_max)
"""

_STAGES = (
    ("stage_card", "inventory_card_sample", CARD_COLUMNS, CARD_TYPES, CARD_ROLLUP),
    ("stage_process", "inventory_process_sample", PROCESS_COLUMNS, PROCESS_TYPES, PROCESS_ROLLUP),
    ("stage_engine", "inventory_engine_sample", ENGINE_COLUMNS, ENGINE_TYPES, ENGINE_ROLLUP),
    ("stage_mig", "inventory_mig_sample", MIG_COLUMNS, MIG_TYPES, None),
)


def write(card_rows, process_rows, engine_rows, mig_rows) -> None:
    """Write the rows of one batch; call inside the batch's transaction."""
    with connection.cursor() as cursor:
        raw = cursor.cursor  # the psycopg cursor, for COPY
        for (stage, target, columns, types, rollup), rows in zip(
            _STAGES, (card_rows, process_rows, engine_rows, mig_rows), strict=True
        ):
            if not rows:
                continue
            raw.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {stage} (LIKE {target}) ON COMMIT DELETE ROWS"
            )
            # Emptied first too: inside an outer transaction (tests, a caller's atomic block)
            # ON COMMIT has not fired yet.
            raw.execute(f"TRUNCATE {stage}")
            column_list = ", ".join(columns)
            with raw.copy(f"COPY {stage} ({column_list}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(types)
                for row in rows:
                    copy.write_row(row)
            raw.execute(f"INSERT INTO {target} ({column_list}) SELECT {column_list} FROM {stage}")
            if rollup:
                for resolution, unit in RESOLUTIONS.items():
                    raw.execute(rollup.format(r=resolution, unit=unit))
