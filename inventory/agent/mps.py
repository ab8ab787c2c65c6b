"""The MPS control daemon's live state: its servers, their cards and clients; and when a server
that had clients goes away, or the daemon stops answering, an `mps_server_down` event naming
every client that died with it (MPS is no fault isolation: one client's fatal fault takes the
server and all its clients down).

The daemon answers on its pipe directory (`CUDA_MPS_PIPE_DIRECTORY`, default
/tmp/nvidia-mps) to `nvidia-cuda-mps-control` run as the daemon's user or root:
`get_server_list` (one server PID a line), `get_client_list <server PID>` (one client PID a
line). A server's cards are those whose NVML process list shows its PID (the server holds a
context on each card it serves). The questions run in a thread of their own, with a timeout,
so a daemon that hangs never holds up a poll: the poll reads the latest answer.
"""

from __future__ import annotations

import glob
import os
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from inventory.telemetry.readings import CollectorFault, PollResult, TelemetryEvent

CONTROL = "nvidia-cuda-mps-control"
SERVER_NAME = "nvidia-cuda-mps-server"
DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"
_STATUSES = ("ACTIVE", "FAULT")


class MpsUnavailable(Exception):
    """The control binary or the daemon's pipe directory is not there."""


class MpsControl:
    def __init__(
        self, binary: str = CONTROL, pipe_dir: str | None = None, timeout_s: float = 2.0
    ) -> None:
        self.binary = binary
        self.pipe_dir = pipe_dir or os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIR
        self.timeout_s = timeout_s

    def ask(self, command: str) -> str:
        binary = shutil.which(self.binary)
        if binary is None:
            raise MpsUnavailable(f"{self.binary} not found")
        if not os.path.isdir(self.pipe_dir):
            raise MpsUnavailable(f"no MPS pipe directory {self.pipe_dir}")
        env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": self.pipe_dir}
        done = subprocess.run(  # a fixed binary, the command on stdin: no shell
            [binary],
            input=command + "\n",
            capture_output=True,
            text=True,
            timeout=self.timeout_s,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise OSError(f"{command}: exit {done.returncode}: {done.stderr.strip()[:200]}")
        return done.stdout

    def statuses(self, servers) -> dict[int, str | None]:
        """Server PID -> ACTIVE, or FAULT for a server that took a fatal client fault and
        refuses new clients (`get_server_status`); None where the daemon does not say."""
        statuses: dict[int, str | None] = {}
        for server in servers:
            try:
                words = self.ask(f"get_server_status {server}").split()
            except (OSError, subprocess.SubprocessError):
                words = []
            statuses[server] = next((w for w in reversed(words) if w in _STATUSES), None)
        return statuses

    def state(self) -> dict[int, list[int]]:
        """Server PID -> its client PIDs.

        The servers and their clients are separate questions, so a server that dies between
        them is listed with no clients: the answer is torn. A server listed without clients is
        looked for once more; gone by then, it is left out, so the monitor still holds its last
        clients as the ones that died with it (kept as a server without clients, its crash would
        have gone unreported).
        """
        servers = {
            server: _pids(self.ask(f"get_client_list {server}"))
            for server in _pids(self.ask("get_server_list"))
        }
        if any(not clients for clients in servers.values()):
            still_listed = set(_pids(self.ask("get_server_list")))
            servers = {
                pid: clients for pid, clients in servers.items() if clients or pid in still_listed
            }
        return servers


def _pids(text: str) -> list[int]:
    return [int(token) for token in text.split() if token.isdecimal()]


@dataclass(slots=True)
class MpsState:
    answered: bool
    servers: dict[int, list[int]] = field(default_factory=dict)
    error: str | None = None
    unavailable: bool = False
    statuses: dict[int, str | None] = field(default_factory=dict)


class MpsMonitor:
    def __init__(self, control: MpsControl | None = None, interval_s: float = 5.0) -> None:
        self.control = control or MpsControl()
        self.interval_s = interval_s
        self._latest: MpsState | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._known: dict[int, dict] = {}  # server PID -> what we knew of it when it last answered
        self._daemon_down = False
        self._said: str | None = None
        self.live: list[dict] = []  # for the batch: who dies together, now

    def refresh(self) -> MpsState:
        """Ask the daemon now (the thread's work; tests call it directly)."""
        try:
            servers = self.control.state()
            state = MpsState(True, servers, statuses=self.control.statuses(servers))
        except MpsUnavailable as error:
            state = MpsState(False, error=str(error), unavailable=True)
        except (OSError, subprocess.SubprocessError, ValueError) as error:
            state = MpsState(False, error=f"{type(error).__name__}: {error}")
        with self._lock:
            self._latest = state
        return state

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mps-control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.interval_s)

    def poll(
        self, ts: float, poll: PollResult, deployments: Mapping[tuple[int, int], str]
    ) -> tuple[list[TelemetryEvent], list[CollectorFault]]:
        with self._lock:
            state, self._latest = self._latest, None
        if state is None:
            return [], []
        events: list[TelemetryEvent] = []
        faults: list[CollectorFault] = []
        if not state.answered:
            if state.error != self._said:
                self._said = state.error
                message = f"{self.control.pipe_dir}: {state.error}"
                faults.append(CollectorFault(None, "mps_control", "Unanswered", message, ts=ts))
            if not state.unavailable and not self._daemon_down:
                self._daemon_down = True
                events += [
                    self._down(ts, pid, known, "daemon_not_answering")
                    for pid, known in sorted(self._known.items())
                    if known["clients"]
                ]
                self._known = {}
            self.live = []
            return events, faults
        self._daemon_down, self._said = False, None
        where = _cards_of_pids(poll)
        current: dict[int, dict] = {}
        for server, clients in state.servers.items():
            cards = where.get(server) or sorted({c for pid in clients for c in where.get(pid, [])})
            current[server] = {
                "server_pid": server,
                "cards": cards,
                "clients": [
                    {
                        "pid": pid,
                        "deployment_id": _deployment(pid, where, deployments),
                    }
                    for pid in clients
                ],
                "status": state.statuses.get(server),
            }
        for pid, known in sorted(self._known.items()):
            if pid not in current and known["clients"]:
                events.append(self._down(ts, pid, known, "server_exited"))
        for pid, now in sorted(current.items()):
            # Alive but refusing new clients after a client's fatal fault: its clients have
            # failed with it, and a restarted engine cannot join it.
            before = self._known.get(pid)
            if now["status"] == "FAULT" and (before is None or before.get("status") != "FAULT"):
                known = now if now["clients"] or before is None else before
                events.append(self._down(ts, pid, known, "server_faulted"))
        self._known = current
        self.live = [
            {
                "server_pid": s["server_pid"],
                "card_uuids": [uuid for _, uuid in s["cards"] if uuid],
                "clients": s["clients"],
                "status": s["status"],
                "pipe_dir": self.control.pipe_dir,
            }
            for s in current.values()
        ]
        return events, faults

    def _down(self, ts: float, server: int, known: dict, cause: str) -> TelemetryEvent:
        cards = known["cards"]
        index, uuid = cards[0] if cards else (None, None)
        return TelemetryEvent(
            ts,
            "mps_server_down",
            index,
            uuid,
            {
                "cause": cause,
                "server_pid": server,
                "card_uuids": [u for _, u in cards if u],
                "clients": known["clients"],
                "source": "mps_control",
                "pipe_dir": self.control.pipe_dir,
            },
        )


class MpsMonitors:
    """Every MPS control daemon of the host, one monitor each: the pipe directories configured
    (AGENT_MPS_PIPE_DIRS), those under the folders AGENT_MPS_PIPE_GLOB names that hold a
    daemon's `control` socket, and those the running daemons were started with, looked for
    again every `rescan_s` (a daemon per GPU, as the runbooks set MPS up, starts and stops
    apart).

    A daemon's environment, which names its directory, is closed to an agent of another user
    or without capabilities (the DaemonSet's pod): such a daemon is named EnvironUnreadable,
    unless the glob found at least as many directories as there are such daemons (which
    directory is whose cannot be told, only that none is left without one)."""

    def __init__(
        self,
        configured: list[str],
        *,
        globs: list[str] = (),
        interval_s: float = 5.0,
        proc: str = "/proc",
        rescan_s: float = 60.0,
        clock=time.monotonic,
        binary: str = CONTROL,
    ) -> None:
        self.configured = configured
        self.globs = list(globs)
        self.binary = binary
        self.interval_s = interval_s
        self.proc = proc
        self.rescan_s = rescan_s
        self._clock = clock
        self.monitors: dict[str, MpsMonitor] = {}
        self._scanned_at: float | None = None
        self._unreadable: set[int] = set()
        # Faults of a rescan wait for the next poll: start() and refresh() rescan too, and
        # what they found would otherwise never be said (its daemons are marked as told).
        self._pending: list[CollectorFault] = []
        self._started = False

    def start(self) -> None:
        self._started = True
        self._rescan()

    def stop(self) -> None:
        for monitor in self.monitors.values():
            monitor.stop()

    def refresh(self) -> None:
        """Every daemon asked now (tests call it; each monitor's thread does otherwise)."""
        self._rescan()
        for monitor in self.monitors.values():
            monitor.refresh()

    def _rescan(self) -> None:
        now = self._clock()
        if self._scanned_at is not None and now - self._scanned_at < self.rescan_s:
            return
        self._scanned_at = now
        found, unreadable = running_pipe_dirs(self.proc)
        globbed = discover_pipe_dirs(self.globs)
        if self.globs and len(set(unreadable)) <= len(set(globbed) - set(found)):
            # as many directories found as daemons that could not say theirs: none is unseen
            self._unreadable |= set(unreadable)
        self._pending += [
            CollectorFault(
                None,
                "mps_control",
                "EnvironUnreadable",
                f"MPS control daemon pid {pid}: its pipe directory cannot be read "
                "from its environment (another user's, or, to an agent without "
                "capabilities such as the DaemonSet's pod, any daemon's): list it in "
                "AGENT_MPS_PIPE_DIRS"
                + (
                    f" or put it under AGENT_MPS_PIPE_GLOB ({', '.join(self.globs)}: "
                    f"{len(globbed)} directories with a control socket for "
                    f"{len(set(unreadable))} such daemons)"
                    if self.globs
                    else ", or find it by AGENT_MPS_PIPE_GLOB"
                ),
            )
            for pid in sorted(set(unreadable) - self._unreadable)
        ]
        self._unreadable |= set(unreadable)
        for pipe_dir in dict.fromkeys([*self.configured, *globbed, *found]):
            if pipe_dir not in self.monitors:
                monitor = MpsMonitor(MpsControl(self.binary, pipe_dir), self.interval_s)
                self.monitors[pipe_dir] = monitor
                if self._started:
                    monitor.start()

    def poll(
        self, ts: float, poll: PollResult, deployments: Mapping[tuple[int, int], str]
    ) -> tuple[list[TelemetryEvent], list[CollectorFault]]:
        self._rescan()
        faults, self._pending = self._pending, []
        events: list[TelemetryEvent] = []
        for monitor in self.monitors.values():
            found, said = monitor.poll(ts, poll, deployments)
            events += found
            faults += said
        for fault in faults:
            fault.ts = ts
        return events, faults

    @property
    def live(self) -> list[dict]:
        return [server for monitor in self.monitors.values() for server in monitor.live]


def discover_pipe_dirs(patterns: list[str]) -> list[str]:
    """The directories the glob patterns match that hold a `control` socket (or FIFO): the
    pipe directories of MPS control daemons, found without reading any process's environment.
    A `control` that is a link or a plain file is none."""
    found = []
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                mode = os.lstat(os.path.join(path, "control")).st_mode
            except OSError:
                continue  # no daemon there, or a directory closed to this user
            if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
                found.append(os.path.normpath(path))
    return list(dict.fromkeys(found))


def running_pipe_dirs(proc: str = "/proc") -> tuple[list[str], list[int]]:
    """The pipe directories of the MPS control daemons running here (their
    CUDA_MPS_PIPE_DIRECTORY, else the default), and the daemons whose environment this user
    may not read."""
    found, unreadable = [], []
    try:
        entries = list(os.scandir(proc))
    except OSError:
        return found, unreadable  # no /proc to look in (a container without it)
    for entry in entries:
        if not entry.name.isdecimal():
            continue
        try:
            with open(f"{entry.path}/cmdline", "rb") as cmdline:
                argv0 = cmdline.read().split(b"\0", 1)[0]
        except OSError:
            continue  # gone meanwhile
        if os.path.basename(argv0).decode(errors="replace") != CONTROL:
            continue
        try:
            with open(f"{entry.path}/environ", "rb") as environ:
                variables = environ.read().split(b"\0")
        except OSError:
            unreadable.append(int(entry.name))
            continue
        pipe_dir = next(
            (
                v.split(b"=", 1)[1].decode()
                for v in variables
                if v.startswith(b"CUDA_MPS_PIPE_DIRECTORY=")
            ),
            DEFAULT_PIPE_DIR,
        )
        found.append(pipe_dir)
    return found, unreadable


def _cards_of_pids(poll: PollResult) -> dict[int, list[tuple[int, str | None]]]:
    where: dict[int, list[tuple[int, str | None]]] = {}
    for card in poll.cards:
        for process in card.processes:
            where.setdefault(process.pid, []).append((card.index, card.uuid))
    return where


def _deployment(pid: int, where, deployments: Mapping[tuple[int, int], str]) -> str | None:
    for index, _ in where.get(pid, []):
        if (index, pid) in deployments:
            return deployments[(index, pid)]
    return None
