"""Each deployment's engine log, tailed between polls and read by logscan.

A deployment's plan entry names its log with `log_path`: a file the engine or its supervisor
writes (`--log-file`, a `docker logs` json-file, a systemd `StandardOutput=append:` file), or
`journald:<unit>` for a systemd unit logging to the journal (`journalctl -u <unit> -f`, read
through a non-blocking pipe; needs the `systemd-journal` group or root). The
tail starts at the end of the file (what was logged before the agent came is history), follows
rotation (a new inode at the path: the rest of the old file first, then the new one from its
start) and truncation (`copytruncate`: back to the start), and reads at most `max_bytes` per
poll so a burst of logging never delays sampling; the rest waits for the next poll. Regular
files never block a read.

An event still open when the log goes quiet for `idle_flush_s` (a traceback whose last lines
were written) is closed then, not held until the next line.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from typing import IO

from inventory.agent.kernel_log import JournalReader
from inventory.agent.logscan import LogEvent, LogScanner


class FileTail:
    def __init__(self, path: str, *, from_start: bool = False, max_bytes: int = 1 << 20) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._file: IO[bytes] | None = None
        self._inode: int | None = None
        self._partial = b""
        self._from_start = from_start

    def read_lines(self) -> list[str]:
        """Complete lines written since the last call (raises OSError when the path is gone)."""
        if self._file is None:
            self._open(start=self._from_start)
        data = self._file.read(self.max_bytes)
        if not data and self._rotated():
            data = self._file.read(self.max_bytes) if self._file else b""
        if not data:
            return []
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        return [_decoded(line) for line in complete]

    def _open(self, *, start: bool) -> None:
        file = open(self.path, "rb")  # noqa: SIM115 - kept open between polls
        stat = os.fstat(file.fileno())
        if not start:
            file.seek(stat.st_size)
        self._file, self._inode = file, stat.st_ino

    def _rotated(self) -> bool:
        """True, and the file reopened, when the path now names a new or a truncated file."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return False  # rotated away, its successor not created yet: keep the old one
        if stat.st_ino != self._inode:
            self.close()
            self._open(start=True)
            return True
        if stat.st_size < self._file.tell():
            self._file.seek(0)
            self._partial = b""
            return True
        return False

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


def _decoded(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    if text.startswith('{"log":'):
        # Docker's json-file driver: {"log":"...\n","stream":"stderr","time":"..."}
        with contextlib.suppress(ValueError, TypeError):
            return str(json.loads(text)["log"]).rstrip("\n")
    return text


@dataclass(slots=True)
class DeploymentLog:
    deployment_id: str
    engine: str | None
    tail: FileTail | JournalTail
    scanner: LogScanner
    quiet_since: float | None = None
    broken: str | None = None  # why the log could not be read, said once


class JournalTail:
    """A systemd unit's journal, followed from now on."""

    def __init__(self, unit: str, journalctl: str = "journalctl") -> None:
        self.path = f"journald:{unit}"
        self._unit, self._journalctl = unit, journalctl
        self._reader = None

    def read_lines(self) -> list[str]:
        if self._reader is None:
            binary = shutil.which(self._journalctl)
            if binary is None:
                raise FileNotFoundError(f"{self._journalctl} not found")
            command = [binary, "-u", self._unit, "-f", "-n", "0", "-o", "cat", "--no-pager"]
            self._reader = JournalReader(command)
        try:
            return self._reader.lines()
        except OSError:
            self.close()  # started again at the next poll
            raise

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def open_tail(path: str, max_bytes: int) -> FileTail | JournalTail:
    if path.startswith("journald:"):
        return JournalTail(path.removeprefix("journald:"))
    return FileTail(path, max_bytes=max_bytes)


class EngineLogs:
    """The log tails of a host's deployments, kept in step with the plan."""

    def __init__(self, *, idle_flush_s: float = 2.0, max_bytes: int = 1 << 20) -> None:
        self.idle_flush_s = idle_flush_s
        self.max_bytes = max_bytes
        self._logs: dict[str, DeploymentLog] = {}

    def follow(self, entries: list[dict]) -> None:
        wanted = {
            str(e["deployment_id"]): e
            for e in entries
            if e.get("log_path") and e.get("deployment_id")
        }
        for deployment_id in list(self._logs):
            current = self._logs[deployment_id]
            entry = wanted.get(deployment_id)
            if entry is None or entry["log_path"] != current.tail.path:
                current.tail.close()
                del self._logs[deployment_id]
        for deployment_id, entry in wanted.items():
            if deployment_id not in self._logs:
                engine = entry.get("engine")
                self._logs[deployment_id] = DeploymentLog(
                    deployment_id,
                    engine,
                    open_tail(entry["log_path"], self.max_bytes),
                    LogScanner(engine if engine in _SCANNED_ENGINES else None),
                )

    def read(self, now: float) -> tuple[list[tuple[str, LogEvent]], list[tuple[str, str, str]]]:
        """(deployment id, event) pairs, and (deployment id, error, message) for unreadable logs."""
        found: list[tuple[str, LogEvent]] = []
        problems: list[tuple[str, str, str]] = []
        for log in self._logs.values():
            try:
                lines = log.tail.read_lines()
            except OSError as error:
                message = f"{log.tail.path}: {error}"
                if log.broken != message:
                    log.broken = message
                    problems.append((log.deployment_id, type(error).__name__, message))
                continue
            log.broken = None
            for line in lines:
                found += [(log.deployment_id, event) for event in log.scanner.feed(line)]
            if lines:
                log.quiet_since = now
            elif log.quiet_since is not None and now - log.quiet_since >= self.idle_flush_s:
                found += [(log.deployment_id, event) for event in log.scanner.flush()]
                log.quiet_since = None
        return found, problems

    def flush(self) -> list[tuple[str, LogEvent]]:
        """Every event still open (the agent is stopping): a traceback cut short is kept."""
        return [
            (log.deployment_id, event)
            for log in self._logs.values()
            for event in log.scanner.flush()
        ]

    def close(self) -> None:
        for log in self._logs.values():
            log.tail.close()
        self._logs.clear()


_SCANNED_ENGINES = frozenset({"vllm", "sglang", "tgi", "ollama", "llamacpp", "pytorch"})
