"""Inference engines' own metrics: vLLM, SGLang, TGI, TEI (Prometheus text) and Ollama (/api/ps).

The same parsers read a real engine and the fleet simulator's rendering of one. Prometheus text
goes through prometheus_client's own parser. Anything that is not what the engine serves raises
`EngineParseError`; a failed fetch raises `EngineScrapeError`. `scrape_all` turns both into
CollectorFaults so a bad endpoint never stops a poll.

Conventions: KV cache usage is a fraction in [0, 1]; latencies are seconds; memory is bytes.
When a page carries several label sets (one per model name or engine rank), request counts are
summed and KV usage takes the fullest pool, which is the one that binds.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from inventory.analytics.stats import histogram_quantile
from inventory.telemetry.readings import CollectorFault

Fetch = Callable[[str, float], str]
Bucket = tuple[float, float]  # (upper bound "le", cumulative count)

_MAX_BODY_BYTES = 8 * 1024 * 1024


class EngineParseError(ValueError):
    """The text is not a metrics page of the expected engine."""


class EngineScrapeError(RuntimeError):
    """The endpoint could not be fetched."""


@dataclass(frozen=True, slots=True)
class LatencySummary:
    count: float
    sum_s: float
    buckets: tuple[Bucket, ...]  # cumulative, ascending, last one is +Inf
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None

    @classmethod
    def from_buckets(cls, buckets: tuple[Bucket, ...], count: float, sum_s: float):
        return cls(
            count,
            sum_s,
            buckets,
            latency_quantile(0.50, buckets),
            latency_quantile(0.95, buckets),
            latency_quantile(0.99, buckets),
        )


@dataclass(frozen=True, slots=True)
class OllamaModel:
    name: str
    size_bytes: int
    size_vram_bytes: int
    context_length: int | None
    expires_at: str | None


@dataclass(slots=True)
class EngineReading:
    engine: str
    deployment_id: str | None = None
    ts: float = 0.0
    kv_cache_usage: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    cache_config: dict[str, str] = field(default_factory=dict)
    latency: dict[str, LatencySummary] = field(default_factory=dict)  # "e2e", "ttft", "itl"
    vram_bytes: int | None = None  # Ollama: sum of size_vram over loaded models
    models: list[OllamaModel] = field(default_factory=list)
    # prometheus_client's process collector: changes when the engine's server restarts
    process_start_time_s: float | None = None
    preemptions_total: float | None = None  # vLLM: requests preempted for KV space, a counter

    # The engine's own KV pool, from vLLM's `vllm:cache_config_info` labels: `num_gpu_blocks`
    # x `block_size` tokens (SGLang: `sglang:max_total_num_tokens`); `kv_cache_memory_bytes`
    # when the pool was set in bytes (--kv-cache-memory-bytes; "None" otherwise);
    # `gpu_memory_utilization`, the share of the card the engine may take. The usage fraction
    # is a share of this pool, not of any reservation the console holds.
    @property
    def kv_pool_tokens(self) -> int | None:
        blocks = _whole(self.cache_config.get("num_gpu_blocks"))
        size = _whole(self.cache_config.get("block_size"))
        if blocks is not None and size is not None:
            return blocks * size
        return _whole(
            self.cache_config.get("kv_cache_size_tokens")
            or self.cache_config.get("max_total_num_tokens")  # SGLang
        )

    @property
    def kv_pool_bytes(self) -> int | None:
        return _whole(self.cache_config.get("kv_cache_memory_bytes"))

    @property
    def memory_fraction(self) -> float | None:
        raw = self.cache_config.get("gpu_memory_utilization")
        try:
            value = float(raw) if raw is not None else None
        except ValueError:
            return None
        return value if value is not None and 0 < value <= 1 else None


def _whole(raw: str | None) -> int | None:
    """A non-negative integer label, or None for absent, "None" or garbage."""
    if raw is None or not raw.isdecimal():
        return None
    return int(raw)


# --- Prometheus text ----------------------------------------------------------------------


def _samples_by_name(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    if not isinstance(text, str):
        raise EngineParseError(f"expected Prometheus text, got {type(text).__name__}")
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[sample.name].append((sample.labels, sample.value))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise EngineParseError(f"malformed Prometheus text: {exc}") from None
    return samples


def _select(rows, model_name: str | None):
    if model_name is None:
        return rows
    return [(labels, v) for labels, v in rows if labels.get("model_name", model_name) == model_name]


def _gauge_sum(samples, names: Iterable[str], model_name: str | None) -> float | None:
    for name in names:
        rows = _select(samples.get(name, ()), model_name)
        if rows:
            return float(sum(v for _, v in rows))
    return None


def _gauge_max(samples, names: Iterable[str], model_name: str | None) -> float | None:
    for name in names:
        rows = _select(samples.get(name, ()), model_name)
        if rows:
            return float(max(v for _, v in rows))
    return None


def _parse_le(raw: str | None) -> float:
    if raw is None:
        raise EngineParseError("histogram bucket without an 'le' label")
    try:
        return math.inf if raw in ("+Inf", "Inf", "inf") else float(raw)
    except ValueError:
        raise EngineParseError(f"histogram bucket with le={raw!r}") from None


def _histogram(samples, base: str, model_name: str | None) -> LatencySummary | None:
    rows = _select(samples.get(base + "_bucket", ()), model_name)
    if not rows:
        return None
    merged: dict[float, float] = defaultdict(float)
    for labels, value in rows:
        merged[_parse_le(labels.get("le"))] += value
    if math.inf not in merged:
        raise EngineParseError(f"{base}: histogram without a +Inf bucket")
    buckets: list[Bucket] = []
    running = 0.0
    for le in sorted(merged):
        # counters scraped mid-update can dip; Prometheus evens that out the same way
        running = max(running, merged[le])
        buckets.append((le, running))
    count = _gauge_sum(samples, [base + "_count"], model_name)
    total = _gauge_sum(samples, [base + "_sum"], model_name)
    return LatencySummary.from_buckets(
        tuple(buckets), buckets[-1][1] if count is None else count, total or 0.0
    )


def latency_quantile(q: float, buckets: tuple[Bucket, ...] | list[Bucket]) -> float | None:
    """PromQL's histogram_quantile (inventory.analytics.stats), or None when the histogram
    holds no observations: an idle interval has no latency, not a latency of zero."""
    try:
        return histogram_quantile(q, buckets)
    except ValueError:
        return None


def histogram_delta(
    later: tuple[Bucket, ...], earlier: tuple[Bucket, ...]
) -> tuple[Bucket, ...] | None:
    """Observations between two scrapes of one histogram, or None where the two cannot be
    compared: the counters went back (the engine restarted, a replay began again) or the
    buckets changed. What a restarted engine counted since it started covers a time nobody
    knows, so it is a new baseline, not an interval."""
    if not later or [le for le, _ in earlier] != [le for le, _ in later]:
        return None
    if any(c < e for (_, c), (_, e) in zip(later, earlier, strict=True)):
        return None
    return tuple((le, c - e) for (le, c), (_, e) in zip(later, earlier, strict=True))


def _latencies(samples, names: Mapping[str, Iterable[str]], model_name: str | None):
    latency: dict[str, LatencySummary] = {}
    for key, candidates in names.items():
        for base in candidates:
            summary = _histogram(samples, base, model_name)
            if summary is not None:
                latency[key] = summary
                break
    return latency


_VLLM_LATENCY = {
    "e2e": ["vllm:e2e_request_latency_seconds"],
    "ttft": ["vllm:time_to_first_token_seconds"],
    "itl": ["vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"],
    "queue": ["vllm:request_queue_time_seconds"],
}
_SGLANG_LATENCY = {
    "e2e": ["sglang:e2e_request_latency_seconds"],
    "ttft": ["sglang:time_to_first_token_seconds"],
    "itl": ["sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"],
}
_TGI_LATENCY = {
    "e2e": ["tgi_request_duration"],
    "queue": ["tgi_request_queue_duration"],
    "itl": ["tgi_request_mean_time_per_token_duration"],
}
# text-embeddings-inference: router/src (server.rs records the request durations) and
# core/src/queue.rs (te_queue_size), exported by metrics-exporter-prometheus like TGI.
_TEI_LATENCY = {
    "e2e": ["te_request_duration"],
    "queue": ["te_request_queue_duration"],
}


def parse_vllm_metrics(text: str, model_name: str | None = None) -> EngineReading:
    """vLLM /metrics, both generations: `kv_cache_usage_perc` (V1) and `gpu_cache_usage_perc`."""
    samples = _samples_by_name(text)
    kv = _gauge_max(samples, ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"], model_name)
    running = _gauge_sum(samples, ["vllm:num_requests_running"], model_name)
    if kv is None and running is None:
        raise EngineParseError("no vllm:kv_cache_usage_perc/gpu_cache_usage_perc nor running")
    config_rows = samples.get("vllm:cache_config_info", ())
    return EngineReading(
        engine="vllm",
        kv_cache_usage=kv,
        requests_running=running,
        requests_waiting=_gauge_sum(samples, ["vllm:num_requests_waiting"], model_name),
        cache_config=dict(config_rows[0][0]) if config_rows else {},
        latency=_latencies(samples, _VLLM_LATENCY, model_name),
        process_start_time_s=_start_time(samples),
        preemptions_total=_gauge_sum(
            samples, ["vllm:num_preemptions_total", "vllm:num_preemptions"], model_name
        ),
    )


def _start_time(samples) -> float | None:
    rows = samples.get("process_start_time_seconds")
    return max(value for _, value in rows) if rows else None


def parse_sglang_metrics(text: str, model_name: str | None = None) -> EngineReading:
    samples = _samples_by_name(text)
    usage = _gauge_max(samples, ["sglang:token_usage"], model_name)
    running = _gauge_sum(samples, ["sglang:num_running_reqs"], model_name)
    if usage is None and running is None:
        raise EngineParseError("no sglang:token_usage nor sglang:num_running_reqs")
    # The KV pool's capacity in tokens, emitted once at start (per TP rank: the same pool).
    pool = _gauge_max(samples, ["sglang:max_total_num_tokens"], model_name)
    return EngineReading(
        engine="sglang",
        kv_cache_usage=usage,
        requests_running=running,
        cache_config={} if pool is None else {"max_total_num_tokens": f"{pool:.0f}"},
        requests_waiting=_gauge_sum(samples, ["sglang:num_queue_reqs"], model_name),
        latency=_latencies(samples, _SGLANG_LATENCY, model_name),
        process_start_time_s=_start_time(samples),
    )


def parse_tgi_metrics(text: str, model_name: str | None = None) -> EngineReading:
    """TGI /metrics. TGI does not export KV usage: only queue and batch sizes."""
    samples = _samples_by_name(text)
    queue = _gauge_sum(samples, ["tgi_queue_size"], None)
    batch = _gauge_sum(samples, ["tgi_batch_current_size"], None)
    if queue is None and batch is None:
        raise EngineParseError("no tgi_queue_size nor tgi_batch_current_size")
    max_tokens = _gauge_sum(samples, ["tgi_batch_current_max_tokens"], None)
    return EngineReading(
        engine="tgi",
        requests_running=batch,
        requests_waiting=queue,
        cache_config={} if max_tokens is None else {"batch_current_max_tokens": f"{max_tokens:g}"},
        latency=_latencies(samples, _TGI_LATENCY, None),
        process_start_time_s=_start_time(samples),
    )


def parse_tei_metrics(text: str, model_name: str | None = None) -> EngineReading:
    """TEI /metrics (its own port, 9000 by default). An embedding server holds no KV cache and
    exports no count of the requests in its batch: its queue and its request durations."""
    samples = _samples_by_name(text)
    queue = _gauge_sum(samples, ["te_queue_size"], None)
    requests = _gauge_sum(samples, ["te_request_count"], None)
    if queue is None and requests is None:
        raise EngineParseError("no te_queue_size nor te_request_count")
    return EngineReading(
        engine="tei",
        requests_waiting=queue,
        latency=_latencies(samples, _TEI_LATENCY, None),
        process_start_time_s=_start_time(samples),
    )


def _int_field(entry: Mapping[str, Any], key: str) -> int:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EngineParseError(f"ollama /api/ps: {key}={value!r} is not a byte count")
    return value


def parse_ollama_ps(text: str, model_name: str | None = None) -> EngineReading:
    """Ollama GET /api/ps: the loaded models and how much of each sits in VRAM."""
    try:
        document = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise EngineParseError(f"ollama /api/ps: not JSON: {exc}") from None
    entries = document.get("models") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise EngineParseError("ollama /api/ps: no 'models' list")
    models = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise EngineParseError(f"ollama /api/ps: bad model entry {entry!r:.80}")
        if model_name is not None and entry["name"] != model_name:
            continue
        context = entry.get("context_length")
        models.append(
            OllamaModel(
                name=entry["name"],
                size_bytes=_int_field(entry, "size"),
                size_vram_bytes=_int_field(entry, "size_vram"),
                context_length=context if isinstance(context, int) else None,
                expires_at=entry.get("expires_at"),
            )
        )
    return EngineReading(
        engine="ollama",
        vram_bytes=sum(m.size_vram_bytes for m in models),
        models=models,
    )


PARSERS: dict[str, Callable[..., EngineReading]] = {
    "vllm": parse_vllm_metrics,
    "sglang": parse_sglang_metrics,
    "tgi": parse_tgi_metrics,
    "tei": parse_tei_metrics,
    "ollama": parse_ollama_ps,
}


# --- fetching -----------------------------------------------------------------------------


def http_fetch(url: str, timeout: float) -> str:
    """Production fetcher: a plain GET with a timeout and a cap on the body size."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read(_MAX_BODY_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise EngineScrapeError(f"GET {url}: {exc}") from None
    if len(body) > _MAX_BODY_BYTES:
        raise EngineScrapeError(f"GET {url}: body larger than {_MAX_BODY_BYTES} bytes")
    return body.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    deployment_id: str
    engine: str  # a key of PARSERS
    url: str
    model_name: str | None = None


def scrape(
    target: ScrapeTarget,
    fetch: Fetch,
    *,
    timeout: float = 2.0,
    clock: Callable[[], float] = time.time,
) -> EngineReading:
    parser = PARSERS.get(target.engine)
    if parser is None:
        raise EngineParseError(f"no parser for engine {target.engine!r}")
    text = fetch(target.url, timeout)
    reading = parser(text, target.model_name)
    reading.deployment_id = target.deployment_id
    reading.ts = clock()
    return reading


def scrape_all(
    targets: Iterable[ScrapeTarget],
    fetch: Fetch,
    *,
    timeout: float = 2.0,
    clock: Callable[[], float] = time.time,
) -> tuple[list[EngineReading], list[CollectorFault]]:
    readings: list[EngineReading] = []
    faults: list[CollectorFault] = []
    for target in targets:
        try:
            readings.append(scrape(target, fetch, timeout=timeout, clock=clock))
        except Exception as exc:  # EngineParseError, EngineScrapeError, or a fetcher bug
            faults.append(
                CollectorFault(
                    None,
                    f"scrape:{target.engine}",
                    type(exc).__name__,
                    f"{target.deployment_id} {target.url}: {exc}",
                    ts=clock(),
                )
            )
    return readings, faults
