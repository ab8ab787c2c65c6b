"""Restarts and KV pressure read from engines' metrics, scrape after scrape.

- `process_start_time_seconds` (every Python engine's Prometheus process collector) moving
  forward means the server restarted, even where NVML never saw the PID change (a container
  that keeps its PID namespace, a scrape interval longer than the outage): `process_restart`.
- vLLM's `num_preemptions_total` growing means requests were preempted to free KV blocks; a
  queue (SGLang, TGI, vLLM waiting requests) growing over `queue_scrapes` scrapes in a row
  means admission is backing up: both `kv_pressure`, at most once per `quiet_s` per
  deployment. A counter that went down is a restart, not negative pressure.

Scrape failures stay what they are: collector faults, not events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inventory.telemetry.engines import EngineReading
from inventory.telemetry.readings import TelemetryEvent


@dataclass(slots=True)
class _Seen:
    start_time: float | None = None
    preemptions: float | None = None
    waiting: list[float] = field(default_factory=list)
    pressure_at: float | None = None


class EngineWatch:
    def __init__(self, *, queue_scrapes: int = 3, quiet_s: float = 300.0) -> None:
        self.queue_scrapes = queue_scrapes
        self.quiet_s = quiet_s
        self._seen: dict[str, _Seen] = {}

    def observe(self, readings: list[EngineReading]) -> list[TelemetryEvent]:
        events: list[TelemetryEvent] = []
        for reading in readings:
            if reading.deployment_id is None:
                continue
            seen = self._seen.setdefault(reading.deployment_id, _Seen())
            events += self._restart(reading, seen)
            events += self._pressure(reading, seen)
        return events

    @staticmethod
    def _restart(reading: EngineReading, seen: _Seen) -> list[TelemetryEvent]:
        start, before = reading.process_start_time_s, seen.start_time
        if start is None:
            return []
        seen.start_time = start
        if before is None or start <= before + 1.0:  # the same process (clock jitter)
            return []
        seen.preemptions = None  # the counters started again with it
        seen.waiting.clear()
        detail = {
            "deployment_id": reading.deployment_id,
            "reason": "engine_restarted",
            "source": "engine_metrics",
            "engine": reading.engine,
            "previous_start_s": before,
            "start_s": start,
        }
        return [TelemetryEvent(reading.ts, "process_restart", None, None, detail)]

    def _pressure(self, reading: EngineReading, seen: _Seen) -> list[TelemetryEvent]:
        found: dict | None = None
        total, before = reading.preemptions_total, seen.preemptions
        if total is not None:
            seen.preemptions = total
            if before is not None and total > before:
                found = {"reason": "preemptions", "preemptions": total - before}
        if reading.requests_waiting is not None:
            seen.waiting = [*seen.waiting, reading.requests_waiting][-(self.queue_scrapes + 1) :]
            rising = len(seen.waiting) > self.queue_scrapes and all(
                a < b for a, b in zip(seen.waiting, seen.waiting[1:], strict=False)
            )
            if found is None and rising:
                found = {"reason": "queue_growth", "requests_waiting": reading.requests_waiting}
        if found is None:
            return []
        if seen.pressure_at is not None and reading.ts - seen.pressure_at < self.quiet_s:
            return []
        seen.pressure_at = reading.ts
        detail = {
            "deployment_id": reading.deployment_id,
            "source": "engine_metrics",
            "engine": reading.engine,
            "kv_cache_usage": reading.kv_cache_usage,
            **found,
        }
        return [TelemetryEvent(reading.ts, "kv_pressure", None, None, detail)]
