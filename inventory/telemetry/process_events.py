"""Process exits and restarts, read from NVML's process lists poll after poll.

A PID that leaves a card's list is an exit, reported with its last and peak memory. It waits
`exit_grace_s` before it is decided, so that an engine log read a moment later can still say
the process died of an OOM. An exit is a probable OOM when the card (or the MIG instance the
process ran on) had less than `near_capacity_fraction` of its memory free at the last sample
before it, or when the engine log reported an OOM for its deployment or PID around then; a
probable OOM that no engine log reported becomes an `oom` event of its own, with the card's last
sample as its snapshot. A deployment whose PIDs left and whose new PIDs appeared within
`restart_window_s` restarted: one `process_restart` event with the old and the new PIDs.

A card that was lost or whose process list could not be read in a poll tells nothing about
its processes: their PIDs are kept, not exited.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from inventory.telemetry.readings import CardReading, PollResult, TelemetryEvent

_PROCESS_CALLS = frozenset(
    {"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses"}
)


@dataclass(frozen=True, slots=True)
class LifecycleSettings:
    exit_grace_s: float = 3.0
    restart_window_s: float = 600.0
    near_capacity_fraction: float = 0.03
    log_oom_window_s: float = 60.0


@dataclass(slots=True)
class _Tracked:
    card_index: int
    card_uuid: str | None
    pid: int
    name: str | None
    deployment_id: str | None
    mig_device_uuid: str | None
    first_seen: float
    last_seen: float
    last_used: int | None = None
    peak_used: int | None = None
    # the memory around it at its last sample: (free, total) of its card or MIG instance
    last_free: int | None = None
    last_total: int | None = None
    neighbours: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class _Exit:
    process: _Tracked
    gone_at: float
    log_oom: bool = False
    restarted: bool = False  # its replacement appeared while it waited out its grace


@dataclass(slots=True)
class _Down:
    """A deployment's PIDs that exited and were not replaced yet."""

    pids: list[int]
    since: float
    oom: bool


class ProcessLifecycle:
    def __init__(self, settings: LifecycleSettings | None = None) -> None:
        self.settings = settings or LifecycleSettings()
        self._tracked: dict[tuple[str, int], _Tracked] = {}
        self._pending: list[_Exit] = []
        self._down: dict[str, _Down] = {}
        self._log_ooms: list[tuple[float, str | None, int | None]] = []

    def note_log_oom(self, ts: float, deployment_id: str | None, pid: int | None) -> None:
        """The engine log of a deployment (or a PID's) reported an OOM at ts."""
        self._log_ooms.append((ts, deployment_id, pid))
        window = self.settings.log_oom_window_s
        self._log_ooms = [entry for entry in self._log_ooms if ts - entry[0] <= 2 * window]
        for pending in self._pending:
            if self._matches_log_oom(pending.process, pending.gone_at):
                pending.log_oom = True

    def observe(
        self, poll: PollResult, deployments: Mapping[tuple[int, int], str]
    ) -> list[TelemetryEvent]:
        ts = poll.ts
        blind = {f.card_index for f in poll.faults if f.call in _PROCESS_CALLS}
        seen: set[tuple[str, int]] = set()
        appeared: dict[str, list[tuple[int, int, str | None]]] = {}
        for card in poll.cards:
            card_key = card.uuid or f"index:{card.index}"
            if card.lost or card.index in blind:
                seen.update(key for key in self._tracked if key[0] == card_key)
                continue
            neighbours = _neighbours(card, deployments)
            for process in card.processes:
                key = (card_key, process.pid)
                seen.add(key)
                deployment = deployments.get((card.index, process.pid))
                tracked = self._tracked.get(key)
                if tracked is None:
                    tracked = self._tracked[key] = _Tracked(
                        card.index, card.uuid, process.pid, process.name, deployment,
                        process.mig_device_uuid, ts, ts,
                    )  # fmt: skip
                    if deployment is not None:
                        appeared.setdefault(deployment, []).append(
                            (process.pid, card.index, card.uuid)
                        )
                tracked.last_seen = ts
                tracked.deployment_id = deployment or tracked.deployment_id
                tracked.last_used = process.used_bytes
                if process.used_bytes is not None:
                    tracked.peak_used = max(tracked.peak_used or 0, process.used_bytes)
                tracked.last_free, tracked.last_total = _room(card, process.mig_device_uuid)
                tracked.neighbours = neighbours
        for key in [key for key in self._tracked if key not in seen]:
            process = self._tracked.pop(key)
            self._pending.append(_Exit(process, ts, self._matches_log_oom(process, ts)))
        events = self._decide_exits(ts)
        events += self._restarts(appeared, ts)
        return events

    # ---- exits ------------------------------------------------------------------------

    def _decide_exits(self, ts: float) -> list[TelemetryEvent]:
        events: list[TelemetryEvent] = []
        waiting: list[_Exit] = []
        for pending in self._pending:
            if ts - pending.gone_at < self.settings.exit_grace_s:
                waiting.append(pending)
                continue
            events += self._exit_events(pending)
        self._pending = waiting
        return events

    def _exit_events(self, pending: _Exit) -> list[TelemetryEvent]:
        process = pending.process
        near = self._near_capacity(process)
        evidence = [
            name
            for name, found in (("near_capacity", near), ("engine_log", pending.log_oom))
            if found
        ]
        snapshot = process.neighbours
        detail = {
            "pid": process.pid,
            "name": process.name,
            "deployment_id": process.deployment_id,
            "mig_device_uuid": process.mig_device_uuid,
            "last_used_bytes": process.last_used,
            "peak_used_bytes": process.peak_used,
            "first_seen": process.first_seen,
            "last_seen": process.last_seen,
            "free_bytes": process.last_free,
            "probable_oom": bool(evidence),
            "oom_evidence": evidence,
            "processes": snapshot,
        }
        events = [
            TelemetryEvent(
                pending.gone_at, "process_exit", process.card_index, process.card_uuid, detail
            )
        ]
        if near and not pending.log_oom:
            oom = {
                "pid": process.pid,
                "deployment_id": process.deployment_id,
                "phase": "serve",
                "source": "nvml_exit",
                "free_bytes": process.last_free,
                "mig_device_uuid": process.mig_device_uuid,
                "processes": snapshot,
            }
            if process.mig_device_uuid is not None:
                oom["capacity_bytes"] = process.last_total
            events.append(
                TelemetryEvent(pending.gone_at, "oom", process.card_index, process.card_uuid, oom)
            )
        if process.deployment_id is not None and not pending.restarted:
            down = self._down.get(process.deployment_id)
            if down is None or pending.gone_at - down.since > self.settings.restart_window_s:
                down = self._down[process.deployment_id] = _Down([], pending.gone_at, False)
            down.pids.append(process.pid)
            down.oom = down.oom or bool(evidence)
        return events

    def _near_capacity(self, process: _Tracked) -> bool:
        if process.last_free is None or not process.last_total:
            return False
        return process.last_free <= self.settings.near_capacity_fraction * process.last_total

    def _matches_log_oom(self, process: _Tracked, ts: float) -> bool:
        window = self.settings.log_oom_window_s
        return any(
            abs(ts - at) <= window
            and (
                (pid is not None and pid == process.pid)
                or (deployment is not None and deployment == process.deployment_id)
            )
            for at, deployment, pid in self._log_ooms
        )

    # ---- restarts -----------------------------------------------------------------------

    def _restarts(
        self, appeared: dict[str, list[tuple[int, int, str | None]]], ts: float
    ) -> list[TelemetryEvent]:
        # Exits still in their grace period count: a PID replaced within one poll restarted.
        for pending in self._pending:
            deployment = pending.process.deployment_id
            if deployment not in appeared:
                continue
            down = self._down.setdefault(deployment, _Down([], pending.gone_at, False))
            down.since = min(down.since, pending.gone_at)
            down.pids.append(pending.process.pid)
            down.oom = down.oom or pending.log_oom or self._near_capacity(pending.process)
            pending.restarted = True
        events = []
        for deployment, new in appeared.items():
            down = self._down.pop(deployment, None)
            if down is None or ts - down.since > self.settings.restart_window_s:
                continue
            _, card_index, card_uuid = new[0]
            events.append(
                TelemetryEvent(
                    ts,
                    "process_restart",
                    card_index,
                    card_uuid,
                    {
                        "deployment_id": deployment,
                        "reason": "oom" if down.oom else "exit",
                        "old_pids": sorted(set(down.pids)),
                        "new_pids": sorted(pid for pid, _, _ in new),
                        "down_s": round(ts - down.since, 3),
                        "source": "nvml",
                    },
                )
            )
        return events


def _room(card: CardReading, mig_uuid: str | None) -> tuple[int | None, int | None]:
    """(free, total) of the memory a process allocates from: its MIG instance, or its card."""
    if mig_uuid is not None:
        for mig in card.mig_devices:
            if mig.uuid == mig_uuid:
                return mig.free_bytes, mig.total_bytes
        return None, None
    if card.total_bytes is None:
        return None, None
    return card.free_bytes, card.total_bytes - (card.reserved_bytes or 0)


def _neighbours(card: CardReading, deployments: Mapping[tuple[int, int], str]) -> list[dict]:
    """Every process on the card at this sample: the OOM snapshot if one of them dies next."""
    return [
        {
            "pid": process.pid,
            "name": process.name,
            "deployment_id": deployments.get((card.index, process.pid)),
            "used_bytes": process.used_bytes,
        }
        for process in card.processes
    ]
