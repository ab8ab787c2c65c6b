"""Which deployment does an NVML process belong to?

The host's deployment plan is a list of dicts:
    {"deployment_id": str,
     "device_uuids": [card "GPU-..." or MIG "MIG-..." UUIDs it runs on],
     "pids": [PIDs, when the deployment agent knows them]            (optional),
     "process_name_pattern": regular expression searched in the NVML name (optional),
     "container_ids": [container runtime ids], "pod_uid": str       (optional, see below),
     "engine": str, "metrics_url": str, ...}                        (carried, not used here)

Rules, in order: a PID listed by exactly one deployment wins; then, where the caller can tell
a PID's container (`containers`, from /proc: inventory.telemetry.containers), the one
deployment naming that container or pod. Otherwise the candidates are the
deployments on the process's device (its MIG device, or its card) whose name pattern matches the
process name; a deployment without a pattern accepts any name, one with a pattern never matches
a process whose name NVML could not give. One candidate maps; none leaves the process unmapped;
several leave it ambiguous. Nothing is guessed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from inventory.telemetry.readings import CardReading

ProcessKey = tuple[int, int]  # (card index, pid)


@dataclass(frozen=True, slots=True)
class PlannedDeployment:
    deployment_id: str
    device_uuids: frozenset[str]
    pids: frozenset[int]
    name_pattern: re.Pattern[str] | None
    containers: frozenset[str] = frozenset()  # container ids and the pod UID

    @classmethod
    def from_plan(cls, entry: Mapping) -> PlannedDeployment:
        pattern = entry.get("process_name_pattern")
        return cls(
            deployment_id=str(entry["deployment_id"]),
            device_uuids=frozenset(entry.get("device_uuids") or ()),
            pids=frozenset(int(p) for p in entry.get("pids") or ()),
            name_pattern=re.compile(pattern) if pattern else None,
            containers=frozenset(
                [
                    *(entry.get("container_ids") or ()),
                    *([entry["pod_uid"]] if entry.get("pod_uid") else []),
                ]
            ),
        )

    def accepts_name(self, name: str | None) -> bool:
        if self.name_pattern is None:
            return True
        return name is not None and self.name_pattern.search(name) is not None


@dataclass(slots=True)
class ProcessMapping:
    deployments: dict[ProcessKey, str] = field(default_factory=dict)
    unmapped: list[ProcessKey] = field(default_factory=list)
    ambiguous: dict[ProcessKey, list[str]] = field(default_factory=dict)


ContainerOf = Callable[[int], "object | None"]  # pid -> Container (container_id, pod_uid)


def map_processes(
    cards: Iterable[CardReading], plan: Iterable[Mapping], containers: ContainerOf | None = None
) -> ProcessMapping:
    planned = [PlannedDeployment.from_plan(entry) for entry in plan]
    by_container = containers is not None and any(d.containers for d in planned)
    owners_of_pid: dict[int, list[str]] = {}
    for deployment in planned:
        for pid in deployment.pids:
            owners_of_pid.setdefault(pid, []).append(deployment.deployment_id)
    result = ProcessMapping()
    for card in cards:
        for process in card.processes:
            key = (card.index, process.pid)
            owners = owners_of_pid.get(process.pid, [])
            if len(owners) == 1:
                result.deployments[key] = owners[0]
                continue
            if by_container and (container := containers(process.pid)) is not None:
                names = {container.container_id, container.pod_uid} - {None}
                owning = [d.deployment_id for d in planned if d.containers & names]
                if len(owning) == 1:
                    result.deployments[key] = owning[0]
                    continue
            devices = {card.uuid, process.mig_device_uuid} - {None}
            candidates = [
                d.deployment_id
                for d in planned
                if d.device_uuids & devices and d.accepts_name(process.name)
            ]
            if len(candidates) == 1:
                result.deployments[key] = candidates[0]
            elif candidates:
                result.ambiguous[key] = candidates
            else:
                result.unmapped.append(key)
    return result
