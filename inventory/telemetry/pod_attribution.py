"""Which Kubernetes pod and container a GPU process belongs to, from its cgroup.

NVML names host PIDs; /proc/<pid>/cgroup names the cgroup the kubelet put the process in, and
that path carries the pod's UID and the container's id in one of a few layouts:

- cgroupfs driver: /kubepods[/burstable|/besteffort]/pod<uid>/<container id>
- systemd driver:  /kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid, "_" for "-">
                   .slice/<runtime>-<container id>.scope, the runtime prefix one of
                   cri-containerd, crio, docker (cri-dockerd); some installs nest it all
                   under kubelet.slice/kubelet-kubepods...
- cgroup v1 has one line per hierarchy, v2 one line "0::<path>"; the pod's part is the same.

A deployment in the console may name its pods by a label selector; `attribute_pods` gives each
such plan entry the PIDs of the GPU processes whose pod matches it, which the PID rule of
inventory.telemetry.process_mapping then maps. Nothing is guessed: a process outside any pod,
or in a pod the directory does not know, stays as the other rules leave it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from inventory.telemetry.readings import CardReading

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_POD = re.compile(
    rf"^(?:kubelet-)?kubepods(?:-(?P<qos>burstable|besteffort))?-pod(?P<uid>{_UID})\.slice$"
)
_POD_CGROUPFS = re.compile(rf"^pod(?P<uid>{_UID})$")
_QOS_SLICE = re.compile(r"^(?:kubelet-)?kubepods-(?P<qos>burstable|besteffort)\.slice$")
_SCOPE = re.compile(r"^(?P<runtime>cri-containerd|crio|docker)-(?P<id>[0-9a-f]{64})\.scope$")
_BARE_ID = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class CgroupOwner:
    """The pod and container a process runs in; container_id None for a pod-level cgroup."""

    pod_uid: str
    container_id: str | None
    runtime: str | None  # cri-containerd, crio, docker; None where the path does not say
    qos_class: str  # Guaranteed, Burstable, BestEffort


def cgroup_path(proc_cgroup: str) -> str | None:
    """The cgroup path of a /proc/<pid>/cgroup text: the first that names a pod, else the v2
    line's (hybrid hosts list v1 hierarchies and a v2 line, which may be just "/")."""
    paths, unified = [], None
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            unified = path
        paths.append(path)
    return next((path for path in paths if "kubepods" in path), unified)


def owner_of_cgroup(path: str) -> CgroupOwner | None:
    """The pod and container of one cgroup path, None for a path outside every pod."""
    parts = [part for part in path.split("/") if part]
    for position, part in enumerate(parts):
        match = _POD.match(part) or _POD_CGROUPFS.match(part)
        if match is None:
            continue
        qos = (match.groupdict().get("qos") or "") or _qos_above(parts[:position])
        leaf = parts[position + 1] if position + 1 < len(parts) else None
        runtime, container = None, None
        if leaf and (scope := _SCOPE.match(leaf)):
            runtime, container = scope["runtime"], scope["id"]
        elif leaf and _BARE_ID.match(leaf):
            container = leaf
        return CgroupOwner(
            pod_uid=match["uid"].replace("_", "-"),
            container_id=container,
            runtime=runtime,
            qos_class={"burstable": "Burstable", "besteffort": "BestEffort"}.get(qos, "Guaranteed"),
        )
    return None


def _qos_above(parts: list[str]) -> str:
    for part in parts:
        if part in {"burstable", "besteffort"}:
            return part
        if match := _QOS_SLICE.match(part):
            return match["qos"]
    return ""


def read_owner(pid: int, proc: Path = Path("/proc")) -> CgroupOwner | None:
    """A live process's pod, None where it has exited, runs outside pods, or is hidden."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    path = cgroup_path(text)
    return owner_of_cgroup(path) if path else None


@dataclass(frozen=True, slots=True)
class Pod:
    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str]


_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}


def pods_of_list(pod_list: Mapping) -> dict[str, Pod]:
    """The pods of an API server's PodList (GET /api/v1/pods), by UID."""
    pods = {}
    for item in pod_list.get("items") or []:
        meta = item.get("metadata") or {}
        if meta.get("uid"):
            pods[meta["uid"]] = Pod(
                meta["uid"], meta.get("namespace", ""), meta.get("name", ""),
                dict(meta.get("labels") or {}),
            )  # fmt: skip
    return pods


def selector_problem(selector: object) -> str | None:
    """Why a pod selector is malformed (a code for the form to explain), None where it is fine."""
    if not isinstance(selector, Mapping):
        return "not_an_object"
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        selector = {"matchLabels": selector}
    if set(selector) - {"matchLabels", "matchExpressions"}:
        return "unknown_key"
    equal = selector.get("matchLabels") or {}
    if not isinstance(equal, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in equal.items()
    ):
        return "labels_not_strings"
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        return "expressions_not_a_list"
    for expression in expressions:
        if not isinstance(expression, Mapping) or not isinstance(expression.get("key"), str):
            return "expression_without_key"
        if expression.get("operator") not in _OPERATORS:
            return "unknown_operator"
        values = expression.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            return "values_not_strings"
    return None


def selector_matches(selector: Mapping, labels: Mapping[str, str]) -> bool:
    """Kubernetes' label selector: matchLabels and matchExpressions (In, NotIn, Exists,
    DoesNotExist), all of them; a plain mapping counts as matchLabels. Empty matches nothing,
    unlike Kubernetes, where it selects everything: a deployment must name its pods."""
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        selector = {"matchLabels": selector}
    equal = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not equal and not expressions:
        return False
    if any(labels.get(key) != value for key, value in equal.items()):
        return False
    for expression in expressions:
        key, operator = expression["key"], expression["operator"]
        values = set(expression.get("values") or ())
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
        if operator not in _OPERATORS:
            return False
    return True


def attribute_pods(
    plan: Iterable[Mapping],
    cards: Iterable[CardReading],
    pods: Mapping[str, Pod],
    owner_of: Callable[[int], CgroupOwner | None] = read_owner,
) -> list[dict]:
    """The plan's entries, those with a `pod_selector` (and optional `pod_namespace`) given
    the PIDs of the GPU processes whose pod it selects, next to any PIDs they listed. A
    malformed selector selects nothing (the console refuses to store one)."""
    entries = [dict(entry) for entry in plan]
    selecting = [
        entry
        for entry in entries
        if entry.get("pod_selector") and selector_problem(entry["pod_selector"]) is None
    ]
    if not selecting:
        return entries
    pids = {process.pid for card in cards for process in card.processes}
    pod_of_pid = {}
    for pid in pids:
        owner = owner_of(pid)
        if owner is not None and owner.pod_uid in pods:
            pod_of_pid[pid] = pods[owner.pod_uid]
    for entry in selecting:
        namespace = entry.get("pod_namespace")
        matched = {
            pid
            for pid, pod in pod_of_pid.items()
            if (namespace is None or pod.namespace == namespace)
            and selector_matches(entry["pod_selector"], pod.labels)
        }
        entry["pids"] = sorted(set(entry.get("pids") or ()) | matched)
    return entries
