"""Sources of a host's readings: real NVML and HTTP, or the fleet simulator."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from pathlib import Path
from typing import Any

from inventory.agent import allocator_scrape
from inventory.agent.signals import HostSignals, SignalOptions
from inventory.telemetry.engines import http_fetch
from inventory.telemetry.readings import TelemetryEvent
from inventory.telemetry.simulator.fleet import Fleet
from inventory.telemetry.simulator.incidents import IncidentScript
from inventory.telemetry.simulator.scenarios import demo_fleet_specs

log = logging.getLogger(__name__)


class NvmlSource:
    """This machine's GPUs through nvidia-ml-py, its engines over HTTP; its exits, restarts,
    engine logs, kernel Xids and MPS daemon through inventory.agent.signals."""

    def __init__(
        self,
        nvml_module: Any,
        clock,
        signal_options: SignalOptions | None = None,
        pods=None,
        allocator_dir: Path | None = None,
        allocator_engines: tuple[str, ...] = allocator_scrape.DEFAULT_PUBLISHING_ENGINES,
    ) -> None:
        self._nvml = nvml_module
        self.now = clock
        self._signal_options = signal_options
        self.pods = pods  # on a Kubernetes node: this node's pods (inventory.agent.kubernetes)
        # The host folder engines in containers write their allocator snapshots to.
        self._allocator_dir = allocator_dir
        self._proc = signal_options.proc if signal_options is not None else Path("/proc")
        # Containerised deployments of these engines that leave no snapshot are named.
        self._allocator_engines = allocator_engines

    def nvml(self) -> Any:
        return self._nvml

    def fetch(self, url: str, timeout: float) -> str:
        return http_fetch(url, timeout)

    def deployments(self, planned: list[dict]) -> list[dict]:
        return planned

    def allocator_snapshots(self, pids: set[int]) -> tuple[dict[int, dict], list[str]]:
        if self._allocator_dir is None:
            return {}, []
        return allocator_scrape.read_snapshots(self._allocator_dir, pids, proc=self._proc)

    def missing_allocator_figures(self) -> allocator_scrape.MissingFigures | None:
        if self._allocator_dir is None or not self._allocator_engines:
            return None
        return allocator_scrape.MissingFigures(self._allocator_dir, self._allocator_engines)

    def events(self) -> list[TelemetryEvent]:
        return []  # Xids arrive through the collector's NVML event set, the rest via signals()

    def signals(self) -> HostSignals:
        return HostSignals(self._signal_options)


class SimulatedSource:
    """One host of the fleet simulator, running in step with the wall clock."""

    def __init__(self, simulator: FleetSimulator, host: str) -> None:
        self._simulator = simulator
        self._host = simulator.fleet.hosts[host]
        self._nvml = simulator.fleet.nvml(host)
        # The simulator names deployments its own way; the console by primary key.
        self._console_ids: dict[str, str] = {}
        # Host actions change the model from the agent's task thread while the sampler steps it.
        self._lock = threading.Lock()

    def nvml(self) -> Any:
        return self._nvml

    def now(self) -> float:
        with self._lock:
            return self._simulator.advance(self._host)

    def run_action(self, request) -> tuple[bool, str]:
        """A host action on the simulated host (an actions file's `simulated = true`)."""
        from inventory.agent.simulated_actions import run_simulated

        with self._lock:
            self._simulator.advance(self._host)
            return run_simulated(self._host, request)

    def fetch(self, url: str, timeout: float) -> str:
        return self._simulator.fleet.fetch(url, timeout)

    def deployments(self, planned: list[dict]) -> list[dict]:
        """The plan's entries, with the PIDs and endpoints the simulated serving stack knows."""
        known = {entry["deployment_id"]: entry for entry in self._host.deployment_plan()}
        completed = []
        for entry in planned:
            simulated = known.get(entry.get("runtime_name") or "")
            if simulated is None:
                completed.append(entry)
                continue
            self._console_ids[simulated["deployment_id"]] = entry["deployment_id"]
            completed.append(
                {
                    **entry,
                    "pids": simulated["pids"],
                    "process_name_pattern": entry.get("process_name_pattern")
                    or simulated["process_name_pattern"],
                    "metrics_url": simulated["metrics_url"],
                    "model_name": simulated["model_name"],
                    "allocator_url": f"sim://{self._host.name}/{simulated['deployment_id']}"
                    "/memory_stats",
                }
            )
        return completed

    def events(self) -> list[TelemetryEvent]:
        events = self._host.drain_events()
        for event in events:
            self._translate(event.detail)
            for process in event.detail.get("processes", []) + event.detail.get("clients", []):
                self._translate(process)
        return events

    def _translate(self, record: dict) -> None:
        if "deployment_id" in record:
            record["deployment_id"] = self._console_ids.get(
                record["deployment_id"], record["deployment_id"]
            )


class FleetSimulator:
    """The demo fleet, with simulated time pinned to the wall clock (t = 0 at UTC midnight).

    `day_shift_s` runs the fleet's day that far ahead of the wall clock: its traffic is that of
    a later hour, while what it reports stays dated now (a test can meet the busy hour at any
    time of day)."""

    def __init__(
        self,
        seed: int,
        clock,
        *,
        specs=None,
        max_step_s: float = 1.0,
        incidents=(),
        day_shift_s: float = 0.0,
    ) -> None:
        today = dt.datetime.fromtimestamp(clock(), tz=dt.UTC).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        self.epoch = today.timestamp() - day_shift_s % 86_400
        self.clock = clock
        self.max_step_s = max_step_s
        self.fleet = Fleet(specs or demo_fleet_specs(), seed, epoch=self.epoch)
        self.script = IncidentScript(tuple(incidents), clock())

    def advance(self, host) -> float:
        now = self.clock()
        if self.script.paused(host.name, now):
            return host.now_epoch()  # time stands still for its agent: nothing is sent
        target = now - self.epoch
        if host.t < target:
            # The first call fast-forwards from midnight in coarse steps.
            step = 60.0 if target - host.t > 120 else self.max_step_s
            host.advance_to(target, max_step_s=step)
        self.script.apply(host, now)
        return host.now_epoch()

    def source_for(self, plan: dict) -> SimulatedSource | None:
        if plan.get("collector") != "simulated" or plan["host"] not in self.fleet.hosts:
            return None
        return SimulatedSource(self, plan["host"])
