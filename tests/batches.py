"""Build agent batches in the documented "gpu-telemetry-batch/1" shape, for ingest tests."""

import itertools
import uuid

GIB = 1024**3
_seq = itertools.count(1)


def card_row(gpu, *, used_max, used_last, total=80 * GIB, reserved=479 * 1024**2, util=50):
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.product_name,
        "lost": False,
        "samples": 10,
        "total_bytes": total,
        "used_bytes_max": used_max,
        "used_bytes_last": used_last,
        "reserved_bytes_max": reserved,
        "reserved_bytes_last": reserved,
        "free_bytes_min": total - reserved - used_max,
        "free_bytes_max": total - reserved - used_last,
        "free_bytes_last": total - reserved - used_last,
        "util_gpu_max": util,
        "util_gpu_last": util,
        "util_memory_max": util,
        "util_memory_last": util,
        "mig_current": None,
        "mig_pending": None,
        "compute_mode": 0,
        "unsupported": [],
    }


def process_row(gpu, pid, *, used_max, used_last, deployment=None, name="python3", alloc=None):
    return {
        "card_index": gpu.index,
        "card_uuid": gpu.uuid,
        "pid": pid,
        "kind": "compute",
        "name": name,
        "name_error": None,
        "used_bytes_max": used_max,
        "used_bytes_last": used_last,
        "gpu_instance_id": None,
        "compute_instance_id": None,
        "mig_device_uuid": None,
        "deployment_id": str(deployment.pk) if deployment else None,
        "first_seen": 0.0,
        "last_seen": 0.0,
        "samples": 10,
        "allocator": alloc,
    }


def batch(host, *, start, end, cards=(), processes=(), events=(), faults=(), seq=None,
          sampler_id=None, engines=()):  # fmt: skip
    return {
        "schema": "gpu-telemetry-batch/1",
        "batch_id": str(uuid.uuid4()),
        "sampler_id": sampler_id or str(uuid.uuid4()),
        "host": host.name,
        "seq": seq if seq is not None else next(_seq),
        "interval_start": start,
        "interval_end": end,
        "polls": 10,
        "driver_version": "590.48.01",
        "cards": list(cards),
        "mig_devices": [],
        "processes": list(processes),
        "engines": list(engines),
        "events": list(events),
        "events_dropped": 0,
        "faults": list(faults),
        "faults_dropped": 0,
    }


def engine_row(deployment, *, running, p99_s, kv_usage=0.5, pool=None):
    return (pool or {}) | {
        "deployment_id": str(deployment.pk),
        "engine": "vllm",
        "kv_cache_usage_max": kv_usage,
        "kv_cache_usage_last": kv_usage,
        "requests_running_max": running,
        "requests_running_last": running,
        "requests_waiting_max": 0,
        "requests_waiting_last": 0,
        "vram_bytes_max": None,
        "vram_bytes_last": None,
        "latency": {
            "e2e": {"count": 100.0, "p50_s": p99_s / 3, "p95_s": p99_s / 1.5, "p99_s": p99_s}
        },
        "last_scrape": 0.0,
        "samples": 10,
    }


def write_history(host, tenants, *, start, minutes, demand, running=None, p99=None,
                  alloc_free=2 * GIB, largest_block=GIB, context=0,
                  pool=None):  # fmt: skip
    """Ingest one batch a minute for `minutes`: each (gpu, deployment) tenant holds
    demand(minute, tenant_index) bytes; its engine runs running(minute, tenant_index)
    requests at p99(minute, tenant_index) seconds. NVML sees each process `context` bytes
    beyond its allocator pool (CUDA context, libraries); `pool` adds the engine's KV pool
    fields (kv_pool_tokens, kv_pool_bytes, memory_fraction) to its rows."""
    from inventory.ingest.writer import ingest_batches
    from inventory.timeseries import rollups

    sampler = str(uuid.uuid4())
    batches = []
    gpus = sorted({gpu.pk: gpu for gpu, _ in tenants}.values(), key=lambda g: g.index)
    for minute in range(minutes):
        end = start + 60 * (minute + 1)
        processes, engines, used = [], {}, {gpu.pk: 0 for gpu in gpus}
        for index, (gpu, deployment) in enumerate(tenants):
            held = demand(minute, index)
            used[gpu.pk] += held + alloc_free + context
            alloc = {"reserved_bytes": held + alloc_free, "allocated_bytes": held,
                     "inactive_split_bytes": alloc_free - largest_block,
                     "largest_free_block_bytes": largest_block}  # fmt: skip
            nvml = held + alloc_free + context
            processes.append(process_row(gpu, 1000 + index, used_max=nvml,
                                         used_last=nvml, deployment=deployment,
                                         alloc=alloc))  # fmt: skip
            if running is not None:
                engines[deployment.pk] = engine_row(
                    deployment,
                    running=running(minute, index),
                    p99_s=p99(minute, index),
                    pool=pool,
                )
        cards = [card_row(gpu, used_max=used[gpu.pk], used_last=used[gpu.pk]) for gpu in gpus]
        batches.append(batch(host, start=end - 60, end=end, cards=cards, processes=processes,
                             engines=list(engines.values()), seq=minute + 1,
                             sampler_id=sampler))  # fmt: skip
    for offset in range(0, len(batches), 200):
        ingest_batches(batches[offset : offset + 200])
    rollups.refresh_all()


def agent_secrets():
    """An agent's secret_for holding every registered host's secret (read now): what the
    tests publish is signed as each host's own agent signs it."""
    from inventory.models import Host

    secrets = dict(Host.objects.values_list("name", "agent_secret"))
    return lambda host: secrets.get(host) or None
