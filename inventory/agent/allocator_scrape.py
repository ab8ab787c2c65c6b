"""The host agent's side of the allocator exporter: every serving process, its figures.

Over HTTP: the deployment's `allocator_url` names the exporter's first port; each serving
process has its own port from there on (see inventory.agent.allocator_exporter), so the agent
reads the ports in turn until one does not answer. It reads the exporter's Prometheus text
(`/metrics`) or its JSON (`/memory_stats`, also what the simulator serves), whichever the URL
names.

From a snapshot folder (`read_snapshots`): engines in containers, whose 127.0.0.1 and PIDs are
their own, write `<pid>-<starttime>.json` into a host folder they mount; the agent finds each
file's process among NVML's host PIDs by the PID its innermost namespace gives it (the last
NSpid of /proc/<pid>/status) and its start time (/proc/<pid>/stat), and keys the figures by the
host PID.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from inventory.agent.allocator_exporter import PORT_SPAN
from inventory.telemetry.readings import CollectorFault

Fetch = Callable[[str, float], str]
_SERIES = re.compile(
    r'^torch_cuda_allocator_(\w+)\{pid="(\d+)",device="(\d+)"\}\s+([0-9.eE+-]+)\s*$', re.M
)
# Prometheus series name -> the batch's allocator key
_FROM_METRICS = {
    "reserved_bytes": "reserved_bytes",
    "allocated_bytes": "allocated_bytes",
    "inactive_split_bytes": "inactive_split_bytes",
    "largest_free_block_bytes": "largest_free_block_bytes",
}
_FROM_STATS = {
    "reserved_bytes.all.current": "reserved_bytes",
    "allocated_bytes.all.current": "allocated_bytes",
    "inactive_split_bytes.all.current": "inactive_split_bytes",
}


def parse(body: str) -> dict[int, dict]:
    """pid -> {reserved_bytes, allocated_bytes, inactive_split_bytes, largest_free_block_bytes},
    summed over the devices a process uses (a process's memory on several cards of its own)."""
    if body.lstrip().startswith("["):
        return _from_rows(json.loads(body))
    figures: dict[int, dict] = {}
    for name, pid, _device, value in _SERIES.findall(body):
        if name in _FROM_METRICS:
            into = figures.setdefault(int(pid), {})
            _add(into, _FROM_METRICS[name], int(float(value)), biggest=name.startswith("largest"))
    return figures


def _from_rows(rows: list[dict]) -> dict[int, dict]:
    figures: dict[int, dict] = {}
    for row in rows:
        into = figures.setdefault(int(row["pid"]), {})
        for key, name in _FROM_STATS.items():
            _add(into, name, row["memory_stats"].get(key))
        _add(into, "largest_free_block_bytes", row.get("largest_free_block_bytes"), biggest=True)
    return figures


def _add(into: dict, key: str, value, *, biggest: bool = False) -> None:
    if value is None:
        return
    value = int(value)
    if key not in into:
        into[key] = value
    else:
        into[key] = max(into[key], value) if biggest else into[key] + value


def read(fetch: Fetch, url: str, timeout: float = 2.0) -> dict[int, dict]:
    """Every process behind the deployment's exporter URL, on its port and the ones after it;
    raises when the first port fails."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.port is None:
        return parse(fetch(url, timeout))  # one endpoint (the simulator's sim:// URLs)
    figures = parse(fetch(url, timeout))
    failed_in_a_row = 0
    for port in range(parts.port + 1, parts.port + PORT_SPAN):
        netloc = f"{parts.hostname}:{port}"
        try:
            figures.update(parse(fetch(urlunsplit(parts._replace(netloc=netloc)), timeout)))
            failed_in_a_row = 0
        except Exception:
            # An exporter takes the next free port: one held by another program is passed
            # over (the next exporter sits past it); two in a row end the processes.
            failed_in_a_row += 1
            if failed_in_a_row == 2:
                break
    return figures


SNAPSHOT_MAX_AGE_S = 30.0  # six of the exporter's 5 s writes missed: its process is stuck
SNAPSHOT_MAX_BYTES = 1 << 20
_SNAPSHOT_NAME = re.compile(r"(\d+)-(\d+)\.json")


def host_processes(pids: Iterable[int], proc: Path = Path("/proc")) -> dict[tuple[int, int], int]:
    """(PID in the process's innermost PID namespace, start time) -> host PID, for `pids`."""
    found = {}
    for pid in pids:
        try:
            status = (proc / str(pid) / "status").read_text()
            started = (proc / str(pid) / "stat").read_text()
        except OSError:
            continue  # gone since NVML listed it
        nspid = re.search(r"^NSpid:\s*(.*)$", status, re.M)
        inner = int(nspid.group(1).split()[-1]) if nspid else pid
        found[(inner, int(started.rsplit(")", 1)[1].split()[19]))] = pid
    return found


def read_snapshots(
    directory: Path,
    pids: Iterable[int],
    *,
    proc: Path = Path("/proc"),
    now: Callable[[], float] = time.time,
    max_age_s: float = SNAPSHOT_MAX_AGE_S,
) -> tuple[dict[int, dict], list[str]]:
    """Host PID -> figures, from the snapshots in `directory` of the processes among `pids`
    (NVML's), and what was wrong with the files of live processes. A file of no live process
    (an engine that crashed, a container's process without a GPU) is passed over."""
    known = host_processes(pids, proc)
    figures: dict[int, dict] = {}
    problems: list[str] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return figures, problems  # no engine on this host publishes there
    except OSError as exc:
        return figures, [f"{directory}: {type(exc).__name__}: {exc}"]
    for name in names:
        match = _SNAPSHOT_NAME.fullmatch(name)
        host_pid = known.get((int(match[1]), int(match[2]))) if match else None
        if host_pid is None:
            continue
        try:
            body, modified = _read_regular(directory / name)
            age = now() - modified
            if age > max_age_s:
                problems.append(f"{name} (host pid {host_pid}): not rewritten for {age:.0f} s")
                continue
            # one process's rows, under the PID of its own namespace
            for inside in _from_rows(json.loads(body)["rows"]).values():
                figures[host_pid] = inside
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"{name} (host pid {host_pid}): {type(exc).__name__}: {exc}")
    return figures, problems


def _read_regular(path: Path) -> tuple[bytes, float]:
    """A plain file's bytes and modification time. The folder is the engines' to write: a link
    there must not make the agent read its own files (its secret) and report on them."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"not a plain file (mode {info.st_mode:o})")
        if info.st_size > SNAPSHOT_MAX_BYTES:
            raise OSError(f"{info.st_size} bytes, more than {SNAPSHOT_MAX_BYTES}")
        return file.read(SNAPSHOT_MAX_BYTES), info.st_mtime


# Engines whose every process publishes allocator figures once the engine plugin is in its
# image, with no change to its start command: vLLM loads the plugin itself (the
# `vllm.general_plugins` entry point). Other PyTorch servers publish only when their launcher
# calls the exporter, so a missing figure is no fault of theirs unless AGENT_ALLOCATOR_ENGINES
# names them; Ollama and llama.cpp have no PyTorch allocator at all.
DEFAULT_PUBLISHING_ENGINES = ("vllm",)
# The plugin writes its snapshot when it loads, before the model (and so before NVML lists
# the process) and again every 5 s: a process NVML has listed this long without one has none.
MISSING_AFTER_S = 60.0


class MissingFigures:
    """Names a containerised deployment of a publishing engine that leaves no figures: its
    GPU processes run in containers, none has a snapshot in the folder (nor figures from an
    exporter URL), and NVML has listed the oldest of them for `after_s`. Said once per
    deployment, as a `scrape:allocator` fault `NotPublished`, and again only after figures
    came and went. A deployment with an `allocator_url` is the URL's to report."""

    def __init__(
        self,
        directory: Path,
        engines: Iterable[str] = DEFAULT_PUBLISHING_ENGINES,
        after_s: float = MISSING_AFTER_S,
    ) -> None:
        self.directory = directory
        self.engines = frozenset(engines)
        self.after_s = after_s
        self._first_seen: dict[int, float] = {}
        self._said: set[str] = set()

    def check(
        self,
        now: float,
        entries: list[dict],
        deployments: dict[tuple[int, int], str],
        have: set[int],
        in_container: Callable[[int], bool],
    ) -> list[CollectorFault]:
        pids_of: dict[str, set[int]] = {}
        for (_, pid), deployment_id in deployments.items():
            pids_of.setdefault(deployment_id, set()).add(pid)
        listed = {pid for pids in pids_of.values() for pid in pids}
        self._first_seen = {pid: at for pid, at in self._first_seen.items() if pid in listed}
        faults = []
        for entry in entries:
            deployment_id = str(entry.get("deployment_id"))
            pids = pids_of.get(deployment_id, set())
            if pids & have:
                self._said.discard(deployment_id)  # figures arrive: a later loss is new
                continue
            if (
                entry.get("engine") not in self.engines
                or entry.get("allocator_url")
                or deployment_id in self._said
            ):
                continue
            contained = sorted(pid for pid in pids if in_container(pid))
            for pid in contained:
                self._first_seen.setdefault(pid, now)
            if not contained or now - min(self._first_seen[p] for p in contained) < self.after_s:
                continue
            self._said.add(deployment_id)
            name = entry.get("runtime_name") or entry.get("model") or deployment_id
            absent = "" if self.directory.is_dir() else (
                f"; the agent's own {self.directory} is not there either: mount it into the "
                "agent too"
            )  # fmt: skip
            faults.append(
                CollectorFault(
                    None,
                    "scrape:allocator",
                    "NotPublished",
                    f"allocator statistics missing for deployment {name} (id {deployment_id}, "
                    f"{entry.get('engine')} in a container, host pid(s) "
                    f"{', '.join(map(str, contained))}): no snapshot in {self.directory} after "
                    f"{self.after_s:.0f} s: the engine plugin is not installed in its image or "
                    "its folder is not mounted into the container (ALLOCATOR_EXPORTER_DIR)"
                    f"{absent}; see docs/deploy.md, engines in containers",
                    ts=now,
                )
            )
        return faults
