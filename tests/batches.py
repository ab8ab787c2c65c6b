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
