"""Engine metrics pages for simulated deployments, in each engine's own format.

Metric names, labels and bucket bounds follow the engines (vLLM V1 and V0, SGLang, TGI, TEI,
Ollama /api/ps) and the fixtures in tests/fixtures/engines/, so `inventory.telemetry.engines`
parses a simulated page with the code it uses on a real one.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime

from inventory.telemetry.simulator.latency import LatencyHistogram

# Bucket bounds as the engines define them.
VLLM_E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
    math.inf,
)
SGLANG_E2E_BUCKETS = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
    800.0,
    math.inf,
)


def _geometric_bounds(start: float) -> tuple[float, ...]:
    """TGI's and TEI's duration buckets: 35 bounds, each 1.5 times the one before, from 1.5 x
    `start`, multiplied in the same order so the `le` labels are the engines' own floats."""
    bounds, value = [], start
    for _ in range(35):
        value *= 1.5
        bounds.append(value)
    return (*bounds, math.inf)


# TGI router/src/server.rs: from 0.0001 s (0.00015 s to 146 s). TEI router/src/prometheus.rs:
# from 0.00001 s.
TGI_DURATION_BUCKETS = _geometric_bounds(0.0001)
TEI_DURATION_BUCKETS = _geometric_bounds(0.00001)
VLLM_BLOCK_SIZE = 16


def _labels(pairs: dict[str, str]) -> str:
    if not pairs:
        return ""
    body = ",".join(f'{key}="{value}"' for key, value in sorted(pairs.items()))
    return "{" + body + "}"


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def _gauge(lines: list[str], name: str, help_text: str, value: float, labels: dict) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} gauge")
    lines.append(f"{name}{_labels(labels)} {float(value)!r}")


def _counter(lines: list[str], name: str, help_text: str, value: float, labels: dict) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} counter")
    lines.append(f"{name}_total{_labels(labels)} {float(math.floor(value))!r}")


def _histogram(lines, name, help_text, histogram: LatencyHistogram, bounds, labels: dict) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} histogram")
    counts = histogram.cumulative_at(bounds)
    for bound, count in zip(bounds, counts, strict=True):
        # observation counters are integers; floor keeps the cumulative counts monotone
        lines.append(f"{name}_bucket{_labels({**labels, 'le': _le(bound)})} {math.floor(count)}.0")
    lines.append(f"{name}_count{_labels(labels)} {math.floor(histogram.count)}.0")
    lines.append(f"{name}_sum{_labels(labels)} {histogram.sum_s!r}")


def render_vllm(replica, card_total_bytes: int) -> str:
    spec = replica.spec
    workload = spec.workload
    v1 = spec.metrics_generation == "v1"
    labels = {"model_name": workload.model, **({"engine": "0"} if v1 else {})}
    kv_tokens = spec.kv_reservation_bytes // workload.shape.kv_bytes_per_token
    lines: list[str] = []
    _gauge(
        lines,
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        round(replica.running),
        labels,
    )
    _gauge(
        lines,
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        round(replica.waiting),
        labels,
    )
    if v1:
        _gauge(
            lines,
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            round(replica.kv_usage, 4),
            labels,
        )
    else:
        _gauge(
            lines,
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage percentage.",
            round(replica.kv_usage, 4),
            labels,
        )
    config = {
        "block_size": str(VLLM_BLOCK_SIZE),
        "cache_dtype": "auto",
        "gpu_memory_utilization": f"{min(0.99, replica.static_per_shard / card_total_bytes):.2f}",
        "num_gpu_blocks": str(kv_tokens // VLLM_BLOCK_SIZE),
        "num_cpu_blocks": "0",
        "swap_space_bytes": "0",
        **({"engine": "0"} if v1 else {}),
    }
    _gauge(lines, "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", 1, config)
    _counter(
        lines,
        "vllm:request_success",
        "Count of successfully processed requests.",
        replica.requests_total,
        {**labels, "finished_reason": "stop"},
    )
    _counter(
        lines,
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        replica.generation_tokens_total,
        labels,
    )
    _histogram(
        lines,
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        replica.histogram,
        VLLM_E2E_BUCKETS,
        labels,
    )
    return "\n".join(lines) + "\n"


def render_sglang(replica) -> str:
    labels = {"model_name": replica.spec.workload.model}
    lines: list[str] = []
    _gauge(
        lines,
        "sglang:num_running_reqs",
        "The number of running requests.",
        round(replica.running),
        labels,
    )
    _gauge(
        lines,
        "sglang:num_queue_reqs",
        "The number of requests in the waiting queue.",
        round(replica.waiting),
        labels,
    )
    _gauge(lines, "sglang:token_usage", "The token usage.", round(replica.kv_usage, 4), labels)
    throughput = replica.running * 30.0 if replica.up else 0.0
    _gauge(
        lines, "sglang:gen_throughput", "The generation throughput (token/s).", throughput, labels
    )
    _histogram(
        lines,
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        replica.histogram,
        SGLANG_E2E_BUCKETS,
        labels,
    )
    return "\n".join(lines) + "\n"


def render_tgi(replica) -> str:
    lines: list[str] = []
    _gauge(lines, "tgi_queue_size", "Number of requests in the queue", round(replica.waiting), {})
    _gauge(lines, "tgi_batch_current_size", "Current batch size", round(replica.running), {})
    max_tokens = round(replica.running) * replica.spec.workload.tokens_per_request
    _gauge(
        lines, "tgi_batch_current_max_tokens", "Maximum tokens of the current batch", max_tokens, {}
    )
    lines.append("# TYPE tgi_request_count counter")
    lines.append(f"tgi_request_count {float(math.floor(replica.requests_total))!r}")
    _histogram(
        lines,
        "tgi_request_duration",
        "Request duration",
        replica.histogram,
        TGI_DURATION_BUCKETS,
        {},
    )
    return "\n".join(lines) + "\n"


def render_tei(replica) -> str:
    """An embedding server's page: its queue and request counts and durations, no KV pool
    (TEI keeps no cache between requests)."""
    lines: list[str] = []
    _gauge(lines, "te_queue_size", "Number of requests in the queue", round(replica.waiting), {})
    lines.append("# TYPE te_request_count counter")
    lines.append(f'te_request_count{{method="single"}} {math.floor(replica.requests_total)}')
    _histogram(
        lines,
        "te_request_duration",
        "Request duration",
        replica.histogram,
        TEI_DURATION_BUCKETS,
        {},
    )
    return "\n".join(lines) + "\n"


def render_ollama_ps(replicas, now_epoch: float) -> str:
    """GET /api/ps of one Ollama server: every model it has loaded, fully in VRAM."""
    models = []
    expires = datetime.fromtimestamp(now_epoch + 300, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for replica in replicas:
        if not replica.up:
            continue
        workload = replica.spec.workload
        size = (
            workload.context_bytes
            + workload.weights_bytes
            + workload.workspace_bytes
            + replica.spec.kv_reservation_bytes
        )
        models.append(
            {
                "name": workload.model,
                "model": workload.model,
                "size": size,
                "size_vram": size,
                "digest": hashlib.sha256(workload.model.encode()).hexdigest(),
                "details": {
                    "parent_model": "",
                    "format": "gguf",
                    "family": "llama",
                    "families": ["llama"],
                    "parameter_size": "",
                    "quantization_level": "Q4_K_M",
                },
                "expires_at": expires,
                "context_length": workload.tokens_per_request,
            }
        )
    return json.dumps({"models": models}, indent=2)
