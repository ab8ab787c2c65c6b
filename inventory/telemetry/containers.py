"""Which container a host PID runs in, from /proc: NVML lists host PIDs, a deployment is a
container (a Docker container, a Kubernetes pod's container).

`/proc/<pid>/status` NSpid gives the PID in each nested namespace (host first, the container's
own last); `/proc/<pid>/cgroup` names the container: cgroup v2 `0::/system.slice/
docker-<id>.scope`, `0::/kubepods.slice/.../cri-containerd-<id>.scope` (or `crio-`), cgroup v1
`12:memory:/docker/<id>`, `/kubepods/burstable/pod<uid>/<id>`. Reading another user's
/proc/<pid>/cgroup needs no privilege; a PID of another PID namespace than the agent's cannot
be read at all (None).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_CONTAINER_ID = re.compile(r"(?:docker-|cri-containerd-|crio-|libpod-|containerd-)?([0-9a-f]{64})")
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)


@dataclass(frozen=True, slots=True)
class Container:
    container_id: str | None  # the runtime's 64-hex id
    pod_uid: str | None  # Kubernetes pod UID, with dashes
    namespace_pid: int | None  # the PID inside the container's own PID namespace
    cgroup: str  # the cgroup path it was read from


def container_of(pid: int, proc: Path = Path("/proc")) -> Container | None:
    """The container of a host PID; None when it runs in none, or /proc cannot tell."""
    try:
        cgroup_text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    namespace_pid = None
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("NSpid:"):
                pids = line.split()[1:]
                namespace_pid = int(pids[-1]) if len(pids) > 1 else None
                break
    except (OSError, ValueError):
        pass
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1]
        match = _CONTAINER_ID.search(path)
        pod = _POD_UID.search(path)
        if match or pod:
            return Container(
                match.group(1) if match else None,
                pod.group(1).replace("_", "-") if pod else None,
                namespace_pid,
                path,
            )
    return None
