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

import os
import shutil
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from inventory.telemetry.readings import CollectorFault, PollResult, TelemetryEvent

CONTROL = "nvidia-cuda-mps-control"
SERVER_NAME = "nvidia-cuda-mps-server"


class MpsUnavailable(Exception):
    """The control binary or the daemon's pipe directory is not there."""


class MpsControl:
    def __init__(
        self, binary: str = CONTROL, pipe_dir: str | None = None, timeout_s: float = 2.0
    ) -> None:
        self.binary = binary
        self.pipe_dir = pipe_dir or os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps"
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
            state = MpsState(True, self.control.state())
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
                faults.append(CollectorFault(None, "mps_control", "Unanswered", state.error, ts=ts))
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
            }
        for pid, known in sorted(self._known.items()):
            if pid not in current and known["clients"]:
                events.append(self._down(ts, pid, known, "server_exited"))
        self._known = current
        self.live = [
            {
                "server_pid": s["server_pid"],
                "card_uuids": [uuid for _, uuid in s["cards"] if uuid],
                "clients": s["clients"],
            }
            for s in current.values()
        ]
        return events, faults

    @staticmethod
    def _down(ts: float, server: int, known: dict, cause: str) -> TelemetryEvent:
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
            },
        )


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
