"""Per-interval aggregation of polls into one batch payload.

Polls arrive at >= 1 Hz; a batch leaves every flush interval (e.g. 60 s). For each card, MIG
device, process and engine the batch keeps the interval's MAXIMUM and its LAST value, so a
peak lasting one poll is never averaged away. Free memory also keeps its MINIMUM (the short
trough is the short peak of "used").

Batch payload (JSON-serialisable dict), schema "gpu-telemetry-batch/1".
Units: memory in BYTES (int); timestamps are POSIX epoch seconds, UTC (float); utilization
in percent (int, 0-100); KV cache usage as a fraction 0-1 (float); latencies in seconds.
A value that was never read in the interval is null.

{
  "schema": "gpu-telemetry-batch/1",
  "batch_id": str,           # uuid4, unique per batch: the ingest side's idempotency key
  "sampler_id": str,         # uuid4 of this sampler instance (changes on restart)
  "host": str,
  "seq": int,                # 1, 2, 3, ... per sampler_id; a gap means batches were lost
  "interval_start": float,   # end of the previous interval (first poll's ts for the first)
  "interval_end": float,     # the flush time
  "polls": int,              # polls aggregated
  "driver_version": str | null,
  "cards": [{
      "index": int, "uuid": str | null, "name": str | null,
      "lost": bool,                       # lost (GpuIsLost) in any poll of the interval
      "samples": int,                     # polls in which the card's memory was read
      "total_bytes": int | null,
      "used_bytes_max": int | null, "used_bytes_last": int | null,
      "reserved_bytes_max": int | null, "reserved_bytes_last": int | null,
      "free_bytes_min": int | null, "free_bytes_max": int | null, "free_bytes_last": int | null,
      "util_gpu_max": int | null, "util_gpu_last": int | null,       # null under MIG
      "util_memory_max": int | null, "util_memory_last": int | null,
      "mig_current": int | null, "mig_pending": int | null,          # NVML_DEVICE_MIG_*
      "compute_mode": int | null,                                    # NVML_COMPUTEMODE_*
      "unsupported": [str]}],             # NVML calls the card answers NotSupported
  "mig_devices": [{
      "card_index": int, "card_uuid": str | null, "uuid": str | null,
      "gpu_instance_id": int | null, "compute_instance_id": int | null,
      "profile": str | null,              # e.g. "3g.71gb", "1c.3g.71gb"
      "start_slot": int | null,           # the GPU instance's first memory slice (privileged)
      "size_slots": int | null,           # and how many it holds
      "total_bytes": int | null,          # the GPU instance's memory, shared by its CIs
      "used_bytes_max": int | null, "used_bytes_last": int | null,
      "free_bytes_min": int | null, "free_bytes_last": int | null}],
  "processes": [{
      "card_index": int, "card_uuid": str | null, "pid": int,
      "kind": "compute" | "mps",          # which NVML list reported it
      "name": str | null, "name_error": str | null,   # e.g. "NVMLError_NotFound" (container)
      "used_bytes_max": int | null, "used_bytes_last": int | null,   # null: NVML N/A
      "gpu_instance_id": int | null, "compute_instance_id": int | null,
      "mig_device_uuid": str | null,
      "deployment_id": str | null,        # from the process-to-deployment mapping
      "first_seen": float, "last_seen": float, "samples": int}],
  "engines": [{
      "deployment_id": str, "engine": str,
      "kv_cache_usage_max": float | null, "kv_cache_usage_last": float | null,
      "requests_running_max": float | null, "requests_running_last": float | null,
      "requests_waiting_max": float | null, "requests_waiting_last": float | null,
      "vram_bytes_max": int | null, "vram_bytes_last": int | null,  # Ollama size_vram
      "kv_pool_tokens": int | null,       # vLLM cache_config_info: num_gpu_blocks x block_size
      "kv_pool_bytes": int | null,        # vLLM cache_config_info: kv_cache_memory_bytes
      "memory_fraction": float | null,    # vLLM cache_config_info: gpu_memory_utilization
      "latency": {"e2e": {"count": float,   # requests completed in the interval
                          "p50_s": float | null, "p95_s": float | null, "p99_s": float | null}},
      "last_scrape": float, "samples": int}],
  "events": [{"ts": float, "kind": "xid" | "oom" | "mps_server_down" | "process_restart",
              "card_index": int | null, "card_uuid": str | null, "detail": {...}}],
  "events_dropped": int,                  # events over the per-batch cap
  "faults": [{"card_index": int | null, "card_uuid": str | null, "call": str, "error": str,
              "message": str,             # the last message of that kind
              "count": int, "first_ts": float, "last_ts": float}],
  "faults_dropped": int                   # distinct fault kinds over the per-batch cap
}

On the wire the agent publishes the same batch as "gpu-telemetry-batch/2"
(batch_schema.on_the_wire): "processes" is an object of columns, one list a field with a value
a row, {"pid": [...], "card_index": [...], ..., "allocator": {"reserved_bytes": [...], ...}}
(inventory.wire.columns). Ingest takes both.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from inventory.telemetry.engines import (
    EngineReading,
    histogram_delta,
    latency_quantile,
)
from inventory.telemetry.readings import CollectorFault, PollResult, TelemetryEvent
from inventory.wire.schema import SCHEMA

# An engine unscraped for this long (down, or out of the plan) starts again from a baseline:
# its next scrape's histogram is not put into one interval.
BASELINE_FORGOTTEN_AFTER_S = 600.0

_CARD_FACTS = ("uuid", "name", "total_bytes", "mig_current", "mig_pending", "compute_mode")


class _Peak:
    """Max, min and last of a value over an interval; None readings are ignored."""

    __slots__ = ("last", "max", "min")

    def __init__(self) -> None:
        self.max = self.min = self.last = None

    def update(self, value) -> None:
        if value is None:
            return
        self.last = value
        if self.max is None or value > self.max:
            self.max = value
        if self.min is None or value < self.min:
            self.min = value


class _CardRow:
    __slots__ = (
        "free",
        "index",
        "info",
        "lost",
        "reserved",
        "samples",
        "used",
        "util_gpu",
        "util_memory",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.info: dict[str, Any] = {}
        self.lost = False
        self.samples = 0
        self.used, self.reserved, self.free = _Peak(), _Peak(), _Peak()
        self.util_gpu, self.util_memory = _Peak(), _Peak()


class _MigRow:
    __slots__ = ("free", "info", "used")

    def __init__(self) -> None:
        self.info: dict[str, Any] = {}
        self.used, self.free = _Peak(), _Peak()


class _ProcessRow:
    __slots__ = ("first_seen", "info", "last_seen", "samples", "used")

    def __init__(self, ts: float) -> None:
        self.info: dict[str, Any] = {}
        self.used = _Peak()
        self.first_seen = self.last_seen = ts
        self.samples = 0


class _EngineRow:
    __slots__ = (
        "engine",
        "kv",
        "kv_pool_bytes",
        "kv_pool_tokens",
        "last_scrape",
        "latency_buckets",
        "memory_fraction",
        "running",
        "samples",
        "vram",
        "waiting",
    )

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.kv, self.running, self.waiting, self.vram = _Peak(), _Peak(), _Peak(), _Peak()
        self.kv_pool_tokens: int | None = None
        self.kv_pool_bytes: int | None = None
        self.memory_fraction: float | None = None
        self.latency_buckets: dict[str, tuple] = {}
        self.last_scrape = 0.0
        self.samples = 0


class IntervalSampler:
    def __init__(self, host: str, *, max_events: int = 1000, max_fault_kinds: int = 200) -> None:
        self.host = host
        self.sampler_id = str(uuid.uuid4())
        self._seq = 0
        self._max_events = max_events
        self._max_fault_kinds = max_fault_kinds
        # histograms as of the previous flush, to report each interval's own latencies
        # (deployment, histogram) -> (its last scrape's buckets, when that flush was)
        self._previous_buckets: dict[tuple[str, str], tuple[tuple, float]] = {}
        self._interval_start: float | None = None
        self._reset()

    def _reset(self) -> None:
        self._polls = 0
        self._driver_version: str | None = None
        self._cards: dict[str, _CardRow] = {}
        self._migs: dict[str, _MigRow] = {}
        self._processes: dict[tuple[str, int, str], _ProcessRow] = {}
        self._engines: dict[str, _EngineRow] = {}
        self._events: list[dict[str, Any]] = []
        self._events_dropped = 0
        self._faults: dict[tuple, dict[str, Any]] = {}
        self._faults_dropped = 0

    @property
    def polls(self) -> int:
        """Polls aggregated since the last flush."""
        return self._polls

    # feeding -----------------------------------------------------------------------------

    def add_poll(
        self, poll: PollResult, deployments: Mapping[tuple[int, int], str] | None = None
    ) -> None:
        """One collector poll; `deployments` maps (card index, pid) to a deployment id."""
        if self._interval_start is None:
            self._interval_start = poll.ts
        self._polls += 1
        self._driver_version = poll.driver_version or self._driver_version
        for card in poll.cards:
            card_key = card.uuid or f"index:{card.index}"
            row = self._cards.get(card_key)
            if row is None:
                row = self._cards[card_key] = _CardRow(card.index)
            info = row.info
            # a lost card reads as nulls: keep what it said while it still answered
            for field_name in _CARD_FACTS:
                value = getattr(card, field_name)
                if value is not None or field_name not in info:
                    info[field_name] = value
            if card.unsupported or "unsupported" not in info:
                info["unsupported"] = list(card.unsupported)
            row.lost = row.lost or card.lost
            if card.used_bytes is not None:
                row.samples += 1
            row.used.update(card.used_bytes)
            row.reserved.update(card.reserved_bytes)
            row.free.update(card.free_bytes)
            row.util_gpu.update(card.util_gpu)
            row.util_memory.update(card.util_memory)
            for mig in card.mig_devices:
                mig_key = mig.uuid or f"{card_key}/{mig.index}"
                mig_row = self._migs.get(mig_key)
                if mig_row is None:
                    mig_row = self._migs[mig_key] = _MigRow()
                mig_row.info.update(
                    card_index=card.index,
                    card_uuid=card.uuid,
                    uuid=mig.uuid,
                    gpu_instance_id=mig.gpu_instance_id,
                    compute_instance_id=mig.compute_instance_id,
                    profile=mig.profile,
                    start_slot=mig.start_slot,
                    size_slots=mig.size_slots,
                    total_bytes=mig.total_bytes,
                )
                mig_row.used.update(mig.used_bytes)
                mig_row.free.update(mig.free_bytes)
            for process in card.processes:
                key = (card_key, process.pid, process.kind)
                process_row = self._processes.get(key)
                if process_row is None:
                    process_row = self._processes[key] = _ProcessRow(poll.ts)
                process_row.info.update(
                    card_index=card.index,
                    card_uuid=card.uuid,
                    pid=process.pid,
                    kind=process.kind,
                    name=process.name,
                    name_error=process.name_error,
                    gpu_instance_id=process.gpu_instance_id,
                    compute_instance_id=process.compute_instance_id,
                    mig_device_uuid=process.mig_device_uuid,
                    deployment_id=(deployments or {}).get((card.index, process.pid)),
                )
                process_row.used.update(process.used_bytes)
                process_row.last_seen = poll.ts
                process_row.samples += 1
        self.add_faults(poll.faults)
        self.add_events(poll.events)

    def add_engine(self, reading: EngineReading) -> None:
        if reading.deployment_id is None:
            return
        row = self._engines.get(reading.deployment_id)
        if row is None:
            row = self._engines[reading.deployment_id] = _EngineRow(reading.engine)
        row.kv.update(reading.kv_cache_usage)
        row.running.update(reading.requests_running)
        row.waiting.update(reading.requests_waiting)
        row.vram.update(reading.vram_bytes)
        # The pool is fixed at engine start; the newest report wins (a restart may change it).
        if reading.cache_config:
            row.kv_pool_tokens = reading.kv_pool_tokens
            row.kv_pool_bytes = reading.kv_pool_bytes
            row.memory_fraction = reading.memory_fraction
        row.latency_buckets = {key: s.buckets for key, s in reading.latency.items()}
        row.last_scrape = reading.ts
        row.samples += 1

    def add_events(self, events: Iterable[TelemetryEvent]) -> None:
        for event in events:
            if len(self._events) >= self._max_events:
                self._events_dropped += 1
                continue
            self._events.append(
                {
                    "ts": event.ts,
                    "kind": event.kind,
                    "card_index": event.card_index,
                    "card_uuid": event.card_uuid,
                    "detail": event.detail,
                }
            )

    def add_faults(self, faults: Iterable[CollectorFault]) -> None:
        for fault in faults:
            key = (fault.card_index, fault.card_uuid, fault.call, fault.error)
            row = self._faults.get(key)
            if row is None:
                if len(self._faults) >= self._max_fault_kinds:
                    self._faults_dropped += 1
                    continue
                row = self._faults[key] = {
                    "card_index": fault.card_index,
                    "card_uuid": fault.card_uuid,
                    "call": fault.call,
                    "error": fault.error,
                    "message": fault.message,
                    "count": 0,
                    "first_ts": fault.ts,
                    "last_ts": fault.ts,
                }
            row["count"] += 1
            row["message"] = fault.message
            row["last_ts"] = fault.ts

    # flushing ----------------------------------------------------------------------------

    def flush(self, now: float) -> dict[str, Any]:
        """The interval's batch; starts the next interval at `now`."""
        self._seq += 1
        start = self._interval_start if self._interval_start is not None else now
        batch = {
            "schema": SCHEMA,
            "batch_id": str(uuid.uuid4()),
            "sampler_id": self.sampler_id,
            "host": self.host,
            "seq": self._seq,
            "interval_start": start,
            "interval_end": now,
            "polls": self._polls,
            "driver_version": self._driver_version,
            "cards": [self._card_row(row) for row in self._cards.values()],
            "mig_devices": [
                {
                    **row.info,
                    "used_bytes_max": row.used.max,
                    "used_bytes_last": row.used.last,
                    "free_bytes_min": row.free.min,
                    "free_bytes_last": row.free.last,
                }
                for row in self._migs.values()
            ],
            "processes": [
                {
                    **row.info,
                    "used_bytes_max": row.used.max,
                    "used_bytes_last": row.used.last,
                    "first_seen": row.first_seen,
                    "last_seen": row.last_seen,
                    "samples": row.samples,
                }
                for row in self._processes.values()
            ],
            "engines": [self._engine_row(d, row) for d, row in self._engines.items()],
            "events": self._events,
            "events_dropped": self._events_dropped,
            "faults": list(self._faults.values()),
            "faults_dropped": self._faults_dropped,
        }
        # A flush may hold no scrape (scrapes further apart than flushes): the baselines of
        # engines that stay live are kept; those of engines gone for a while are forgotten.
        self._previous_buckets = {
            k: v
            for k, v in self._previous_buckets.items()
            if now - v[1] <= BASELINE_FORGOTTEN_AFTER_S
        }
        self._interval_start = now
        self._reset()
        return batch

    @staticmethod
    def _card_row(row: _CardRow) -> dict[str, Any]:
        return {
            "index": row.index,
            **row.info,
            "lost": row.lost,
            "samples": row.samples,
            "used_bytes_max": row.used.max,
            "used_bytes_last": row.used.last,
            "reserved_bytes_max": row.reserved.max,
            "reserved_bytes_last": row.reserved.last,
            "free_bytes_min": row.free.min,
            "free_bytes_max": row.free.max,
            "free_bytes_last": row.free.last,
            "util_gpu_max": row.util_gpu.max,
            "util_gpu_last": row.util_gpu.last,
            "util_memory_max": row.util_memory.max,
            "util_memory_last": row.util_memory.last,
        }

    def _engine_row(self, deployment_id: str, row: _EngineRow) -> dict[str, Any]:
        latency = {}
        for key, buckets in row.latency_buckets.items():
            previous, previous_at = self._previous_buckets.get((deployment_id, key), (None, 0.0))
            self._previous_buckets[(deployment_id, key)] = (buckets, row.last_scrape)
            if previous is None:
                # The first scrape since the agent started holds everything the engine
                # served since it started, maybe days: a baseline, not this interval.
                continue
            interval = histogram_delta(buckets, previous)
            window_s = row.last_scrape - previous_at
            if interval is None or window_s <= 0:
                continue  # a restart is a new baseline; the same scrape again covers no time
            latency[key] = {
                "count": interval[-1][1],
                # the seconds the count covers, scrape to scrape: a rate is count / window_s
                # whatever the flush and scrape intervals are
                "window_s": round(window_s, 3),
                "p50_s": latency_quantile(0.50, interval),
                "p95_s": latency_quantile(0.95, interval),
                "p99_s": latency_quantile(0.99, interval),
            }
        return {
            "deployment_id": deployment_id,
            "engine": row.engine,
            "kv_cache_usage_max": row.kv.max,
            "kv_cache_usage_last": row.kv.last,
            "requests_running_max": row.running.max,
            "requests_running_last": row.running.last,
            "requests_waiting_max": row.waiting.max,
            "requests_waiting_last": row.waiting.last,
            "vram_bytes_max": row.vram.max,
            "vram_bytes_last": row.vram.last,
            "kv_pool_tokens": row.kv_pool_tokens,
            "kv_pool_bytes": row.kv_pool_bytes,
            "memory_fraction": row.memory_fraction,
            "latency": latency,
            "last_scrape": row.last_scrape,
            "samples": row.samples,
        }
