"""A real host's events beyond NVML's own: process exits and restarts, engine-log OOMs and
faults, kernel-log Xids and the MPS daemon, each turned into the `TelemetryEvent`s the
simulator raises for its hosts, with the same detail keys, so that ingest gives them the same
snapshot and triage and the console the same OOM history, events and MPS view.

Everything here runs inside the sampling tick and never blocks: log files are read up to a
cap, the kernel log and the MPS control daemon through non-blocking pipes or short timeouts.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inventory.agent.engine_logs import EngineLogs
from inventory.agent.kernel_log import KernelXidSource
from inventory.agent.logscan import LogEvent
from inventory.telemetry.containers import Container, container_of
from inventory.telemetry.engine_signals import EngineWatch
from inventory.telemetry.process_events import LifecycleSettings, ProcessLifecycle
from inventory.telemetry.readings import CollectorFault, PollResult, TelemetryEvent
from inventory.telemetry.xid_events import XidDeduplicator

# logscan kind -> event kind; `restart` is left to the process lists, which see the new PID,
# and `driver_fault` to the kernel-log source, which reads the driver's own log
_EVENT_KIND = {
    "oom": "oom",
    "fault": "engine_fault",
    "engine_died": "engine_fault",
    "xid": "xid",
    "kv_pressure": "kv_pressure",
}
_POLLS_KEPT = 30
_HIDDEN_PROCESS_BYTES = 512 << 20  # more than a MIG instance's own overhead
_FIGURES_FROM_LOG = ("requested_bytes", "free_bytes", "gpu_index", "reason", "phase", "message")


@dataclass
class SignalOptions:
    lifecycle: LifecycleSettings = field(default_factory=LifecycleSettings)
    kernel_log: KernelXidSource | None = None
    mps: Any = None  # inventory.agent.mps.MpsMonitor
    engine_logs: EngineLogs = field(default_factory=EngineLogs)
    proc: Path = Path("/proc")
    is_root: bool = field(default_factory=lambda: os.geteuid() == 0)


class HostSignals:
    def __init__(self, options: SignalOptions | None = None) -> None:
        self.options = options or SignalOptions()
        self.lifecycle = ProcessLifecycle(self.options.lifecycle)
        self.xids = XidDeduplicator()
        self.engine_watch = EngineWatch()
        self._restarted_at: dict[str | None, float] = {}
        self._containers: dict[int, Container | None] = {}
        self._hidden: set[int] = set()
        self._entries: dict[str, dict] = {}
        # An engine log's OOM is often read after its process left NVML's list: its card and
        # snapshot come from the last poll that still had it.
        self._polls: deque[tuple[PollResult, Mapping[tuple[int, int], str]]] = deque(
            maxlen=_POLLS_KEPT
        )

    def collect(
        self,
        poll: PollResult,
        deployments: Mapping[tuple[int, int], str],
        entries: list[dict],
        allocator: Callable[[int], dict | None],
    ) -> tuple[list[TelemetryEvent], list[CollectorFault]]:
        ts = poll.ts
        events: list[TelemetryEvent] = []
        faults: list[CollectorFault] = []
        # before the sampler takes the poll: an Xid the kernel log already gave is not repeated
        poll.events = [
            event
            for event in poll.events
            if event.kind != "xid"
            or self.xids.admit("nvml", event.card_uuid or event.card_index, event.detail["xid"], ts)
        ]
        self._polls.append((poll, deployments))
        logs = self.options.engine_logs
        logs.follow(entries)
        found, problems = logs.read(ts)
        by_id = self._entries = {str(e.get("deployment_id")): e for e in entries}
        for deployment_id, log_event in found:
            event = self._from_log(deployment_id, log_event, by_id.get(deployment_id), ts)
            if event is not None:
                events.append(event)
        faults += [
            CollectorFault(None, "engine_log", error, f"{deployment_id} {message}", ts=ts)
            for deployment_id, error, message in problems
        ]
        faults += self._privileges(poll)
        events += self._one_per_restart(self.lifecycle.observe(poll, deployments))
        if (kernel := self.options.kernel_log) is not None:
            kernel_events, kernel_faults = kernel.read(ts)
            faults += kernel_faults
            # only Xids are told by NVML too; a driver fault without one is the kernel's alone
            events += [
                e
                for e in kernel_events
                if e.kind != "xid"
                or self.xids.admit(
                    "kernel", e.card_uuid or e.detail.get("pci_bus_id"), e.detail["xid"], ts
                )
            ]
        if (mps := self.options.mps) is not None:
            mps_events, mps_faults = mps.poll(ts, poll, deployments)
            events += mps_events
            faults += mps_faults
        for event in events:
            for process in event.detail.get("processes", []):
                printed = process.pop("log_allocator", None)
                if process.get("allocator") is None:
                    process["allocator"] = allocator(process["pid"]) or printed
        return events, faults

    def _from_log(
        self, deployment_id: str, found: LogEvent, entry: dict | None, ts: float
    ) -> TelemetryEvent | None:
        kind = _EVENT_KIND.get(found.kind)
        if kind is None:
            return None
        detail: dict[str, Any] = {
            "deployment_id": deployment_id,
            "source": "engine_log",
            "engine": found.engine,
            "log_line": found.line,
        }
        detail.update({k: found.detail[k] for k in _FIGURES_FROM_LOG if k in found.detail})
        if found.kind == "engine_died":
            detail["fatal"] = True
        pid = found.detail.get("pid")
        poll, deployments = self._poll_with(pid, deployment_id)
        card_index, card_uuid = self._card_of(poll, pid, entry)
        if pid is None and card_index is not None:
            # one process of the deployment on that card: the log is its
            on_card = [
                p.pid
                for c in poll.cards
                if c.index == card_index
                for p in c.processes
                if deployments.get((c.index, p.pid)) == deployment_id
            ]
            pid = on_card[0] if len(on_card) == 1 else None
        detail["pid"] = pid
        if kind == "xid":
            detail["xid"] = found.detail["xid"]
            if not self.xids.admit("kernel", card_uuid or card_index, detail["xid"], ts):
                return None
        if kind == "oom":
            self.lifecycle.note_log_oom(ts, deployment_id, pid)
            detail["processes"] = self._snapshot(poll, deployments, card_index, pid, found.detail)
        return TelemetryEvent(ts, kind, card_index, card_uuid, detail)

    def _poll_with(self, pid: int | None, deployment_id: str):
        """The latest kept poll where the PID (else the deployment) still ran, else the last."""
        for poll, deployments in reversed(self._polls):
            for card in poll.cards:
                for process in card.processes:
                    if process.pid == pid or (
                        pid is None and deployments.get((card.index, process.pid)) == deployment_id
                    ):
                        return poll, deployments
        return self._polls[-1]

    @staticmethod
    def _card_of(
        poll: PollResult, pid: int | None, entry: dict | None
    ) -> tuple[int | None, str | None]:
        """The card a log event happened on: its PID's card, else the deployment's one card.

        The CUDA device index in the message is the process's own numbering (after
        CUDA_VISIBLE_DEVICES), not NVML's, so it is never used to pick a card.
        """
        for card in poll.cards:
            if pid is not None and any(p.pid == pid for p in card.processes):
                return card.index, card.uuid
        uuids = set((entry or {}).get("device_uuids") or ())
        cards = [
            (card.index, card.uuid)
            for card in poll.cards
            if card.uuid in uuids or any(m.uuid in uuids for m in card.mig_devices)
        ]
        return cards[0] if len(cards) == 1 else (None, None)

    @staticmethod
    def _snapshot(poll, deployments, card_index, pid, figures: dict) -> list[dict]:
        """The card's processes at that poll; the failing one with the allocator figures its
        OOM message printed, used when no exporter gave better."""
        card = next((c for c in poll.cards if c.index == card_index), None)
        if card is None:
            return []
        rows = [
            {
                "pid": p.pid,
                "name": p.name,
                "deployment_id": deployments.get((card.index, p.pid)),
                "used_bytes": p.used_bytes,
                "allocator": None,
            }
            for p in card.processes
        ]
        printed = {
            key: figures[key] for key in ("allocated_bytes", "reserved_bytes") if key in figures
        }
        for row in rows:
            if row["pid"] == pid and len(printed) == 2:
                row["log_allocator"] = printed
        return rows

    def container_of(self, pid: int) -> Container | None:
        """The container of a host PID (cached: a PID keeps its container while it lives)."""
        if pid not in self._containers:
            if len(self._containers) > 4096:
                self._containers.clear()
            self._containers[pid] = container_of(pid, self.options.proc)
        return self._containers[pid]

    def _privileges(self, poll: PollResult) -> list[CollectorFault]:
        """MIG instances holding memory with no process listed: NVML hides MIG processes
        from an agent without root (CAP_SYS_ADMIN). Said once per card, while it lasts."""
        if self.options.is_root:
            return []
        faults = []
        for card in poll.cards:
            hidden = (
                card.mig_current == 1
                and not card.processes
                and any((mig.used_bytes or 0) > _HIDDEN_PROCESS_BYTES for mig in card.mig_devices)
            )
            if hidden and card.index not in self._hidden:
                faults.append(
                    CollectorFault(
                        card.index,
                        "privileges",
                        "ProcessesHidden",
                        "MIG instances hold memory but NVML lists no process, on the card or "
                        "on the instances' own handles: this driver hides MIG processes from an "
                        "agent without root (or CAP_SYS_ADMIN)",
                        card.uuid,
                        poll.ts,
                    )
                )
            if hidden:
                self._hidden.add(card.index)
            else:
                self._hidden.discard(card.index)
        return faults

    def engine_events(self, readings) -> list[TelemetryEvent]:
        """Restarts and KV pressure from the engines' metrics of one scrape."""
        return self._one_per_restart(self.engine_watch.observe(readings))

    def _one_per_restart(self, events: list[TelemetryEvent]) -> list[TelemetryEvent]:
        """NVML's process lists and the engine's start time both see a restart: one event."""
        kept = []
        for event in events:
            if event.kind == "process_restart":
                deployment = event.detail.get("deployment_id")
                last = self._restarted_at.get(deployment)
                self._restarted_at[deployment] = event.ts
                if last is not None and event.ts - last <= self.options.lifecycle.restart_window_s:
                    continue
            kept.append(event)
        return kept

    def drain(self, ts: float) -> list[TelemetryEvent]:
        """What the engine logs still hold open, for the agent's last batch before it stops."""
        if not self._polls:
            return []
        found = self.options.engine_logs.flush()
        return [
            event
            for deployment_id, log_event in found
            if (
                event := self._from_log(
                    deployment_id, log_event, self._entries.get(deployment_id), ts
                )
            )
            is not None
        ]

    def mps_live(self) -> list[dict] | None:
        """The MPS servers, their cards and clients at the last answer; None without MPS."""
        return None if self.options.mps is None else self.options.mps.live

    def close(self) -> None:
        self.options.engine_logs.close()
        if self.options.kernel_log is not None:
            self.options.kernel_log.close()
