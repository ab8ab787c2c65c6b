"""Xids from the kernel log, for hosts where NVML's event set is unavailable or unprivileged,
and the driver faults that come with no Xid.

The NVIDIA driver writes every Xid to the kernel log (`NVRM: Xid (PCI:0000:0a:00): 31, ...`).
Some ways of losing a card print no Xid: the driver could not initialise it (`RmInitAdapter
failed!`) or its GSP firmware stopped answering (`GSP RM heartbeat timed out`); each is a
`gpu_lost` event with the `reason` logscan gave, the card being out of service either way.
`/dev/kmsg` needs CAP_SYSLOG when `kernel.dmesg_restrict=1` (the default on most
distributions); `journalctl -k` needs root or the `systemd-journal` group. The source tries
both, in that order, reads only what arrived since it opened (no replay of old Xids after an
agent restart), never blocks a poll, and says once, as a fault, why it cannot read either.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any

from inventory.agent.logscan import LogScanner
from inventory.telemetry.readings import CollectorFault, TelemetryEvent
from inventory.telemetry.xid_events import xid_detail

_READ_CHUNK = 65536
_MAX_LINES_PER_POLL = 5000  # a flood of kernel messages must not stall sampling
_STDERR_KEPT = 2000  # bytes of journalctl's stderr kept for the fault's message
# A reader that failed (journalctl exited: no journal mounted, say) is opened again only
# after this long: reopening every poll would start a journalctl a second.
REOPEN_AFTER_S = 60.0


class _LineReader:
    """Lines from a non-blocking file descriptor, split however the reads fall."""

    def __init__(self, fd: int, *, kmsg: bool) -> None:
        self.fd = fd
        self._kmsg = kmsg
        self._partial = b""

    def lines(self) -> list[str]:
        lines: list[str] = []
        while len(lines) < _MAX_LINES_PER_POLL:
            try:
                chunk = os.read(self.fd, _READ_CHUNK)
            except BlockingIOError:
                break
            except OSError as error:
                if error.errno == errno.EPIPE:  # kmsg: records overwritten before we read them
                    continue
                raise
            if not chunk:
                break
            data = self._partial + chunk
            *complete, self._partial = data.split(b"\n")
            for raw in complete:
                text = raw.decode("utf-8", errors="replace")
                if self._kmsg:
                    if text.startswith(" "):
                        continue  # a record's KEY=value dictionary lines
                    # "priority,sequence,microseconds,flags;message"
                    text = text.split(";", 1)[1] if ";" in text else text
                lines.append(text)
        return lines

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def open_kmsg(path: str = "/dev/kmsg") -> _LineReader:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    os.lseek(fd, 0, os.SEEK_END)  # from now on: Xids before the agent started are history
    return _LineReader(fd, kmsg=True)


class JournalReader(_LineReader):
    """`journalctl ... -f -o cat`, read through a non-blocking pipe. Its stderr goes to a
    file (a pipe nobody drains could block it), so an exit can say why."""

    def __init__(self, command: list[str]) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the reader)
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL
        )
        fd = self.process.stdout.fileno()
        os.set_blocking(fd, False)
        super().__init__(fd, kmsg=False)

    def lines(self) -> list[str]:
        lines = super().lines()
        if not lines and self.process.poll() is not None:
            self._stderr.seek(0)
            said = self._stderr.read()[-_STDERR_KEPT:].decode(errors="replace").strip()
            last = said.splitlines()[-1] if said else ""
            raise OSError(
                f"journalctl exited with status {self.process.returncode}"
                + (f": {last}" if last else "")
            )
        return lines

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(2)
        self.process.stdout.close()
        self._stderr.close()


# Groups whose members journald lets read the system journal (journalctl(1), "Access").
JOURNAL_GROUPS = ("systemd-journal", "adm", "wheel")
UNREADABLE = (
    "kernel log unreadable: grant CAP_SYSLOG (for /dev/kmsg under kernel.dmesg_restrict=1) or "
    "the systemd-journal group (for journalctl -k); docs/deploy.md, signals and privileges"
)


def open_journal(journalctl: str = "journalctl") -> _LineReader:
    binary = shutil.which(journalctl)
    if binary is None:
        raise FileNotFoundError(f"{journalctl} not found")
    if os.geteuid() != 0 and not _in_a_journal_group():
        # journalctl would start, print a hint and follow nothing: say why now instead.
        raise PermissionError(f"not root nor in a group of {', '.join(JOURNAL_GROUPS)}")
    directory = os.environ.get("AGENT_JOURNAL_DIR")  # a host's journal mounted in a pod
    where = ["--directory", directory] if directory else []
    return JournalReader([binary, "-k", "-f", "-n", "0", "-o", "cat", "--no-pager", *where])


def _in_a_journal_group() -> bool:
    groups = set(os.getgroups()) | {os.getegid()}
    for name in JOURNAL_GROUPS:
        with contextlib.suppress(KeyError):
            if grp.getgrnam(name).gr_gid in groups:
                return True
    return False


CardByPci = Callable[[str], "tuple[int, str | None] | None"]


class KernelXidSource:
    """Turns the kernel log's NVRM lines into `xid` and `gpu_lost` events with the card they
    hit."""

    def __init__(self, openers: list[Callable[[], _LineReader]], card_by_pci: CardByPci) -> None:
        self._openers = openers
        self._card_by_pci = card_by_pci
        self._reader: _LineReader | None = None
        self._scanner = LogScanner("kernel")
        self._unavailable: str | None = None
        self._reported = False
        self._failed: str | None = None  # the last read's failure, said once until lines come
        self._reopen_at = 0.0
        self.via: str | None = None  # which log it reads, for the collector-health panel

    def read(self, ts: float) -> tuple[list[TelemetryEvent], list[CollectorFault]]:
        faults: list[CollectorFault] = []
        if self._reader is None and ts < self._reopen_at:
            return [], faults
        if self._reader is None and not self._open():
            if not self._reported:
                self._reported = True
                error = "Unreadable" if UNREADABLE in (self._unavailable or "") else "Unavailable"
                faults.append(
                    CollectorFault(None, "kernel_log", error, self._unavailable or "", ts=ts)
                )
            return [], faults
        try:
            lines = self._reader.lines()
        except OSError as error:
            if str(error) != self._failed:  # the same failure again is no news
                self._failed = str(error)
                faults.append(
                    CollectorFault(None, "kernel_log", type(error).__name__, str(error), ts=ts)
                )
            self.close()
            self._reopen_at = ts + REOPEN_AFTER_S
            return [], faults
        if lines:
            self._failed = None
        found = [event for line in lines for event in self._scanner.feed(line)]
        # A driver fault's line waits for the next one to be closed; on a quiet kernel log
        # that could be hours, so what a read leaves open is closed with it.
        found += self._scanner.flush()
        events: list[TelemetryEvent] = []
        for event in found:
            if event.kind == "xid":
                events.append(self._event(event.detail, ts))
            elif event.kind == "driver_fault":
                events.append(self._driver_fault(event.detail, ts))
        return events, faults

    def _open(self) -> bool:
        reasons, errors = [], []
        for opener in self._openers:
            try:
                self._reader = opener()
            except OSError as error:
                reasons.append(f"{getattr(opener, '__name__', opener)}: {error}")
                errors.append(error)
                continue
            self.via = getattr(opener, "__name__", str(opener))
            return True
        self._unavailable = "; ".join(reasons) or "no kernel log source"
        if any(isinstance(error, PermissionError) for error in errors):
            self._unavailable = f"{UNREADABLE} ({self._unavailable})"
        return False

    def _event(self, found: dict[str, Any], ts: float) -> TelemetryEvent:
        xid = int(found["xid"])
        index, uuid = self._card(found)
        detail = {"xid": xid, **xid_detail(xid), "source": "kernel"}
        for key in ("pci_bus_id", "pid", "process_name", "message"):
            if key in found:
                detail[key] = found[key]
        return TelemetryEvent(ts, "xid", index, uuid, detail)

    def _driver_fault(self, found: dict[str, Any], ts: float) -> TelemetryEvent:
        index, uuid = self._card(found)
        detail = {"source": "kernel", "reason": found["reason"]}
        for key in ("pci_bus_id", "message"):
            if key in found:
                detail[key] = found[key]
        return TelemetryEvent(ts, "gpu_lost", index, uuid, detail)

    def _card(self, found: dict[str, Any]) -> tuple[int | None, str | None]:
        """The card an event names by its PCI address (index, UUID), as far as known."""
        uuid = found.get("card_uuid")
        pci = found.get("pci_bus_id")
        if pci is not None and (card := self._card_by_pci(pci)) is not None:
            return card[0], uuid or card[1]
        return None, uuid

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def pci_bus_id(value: Any) -> str:
    """NVML's bus id ("00000000:0A:00.0", str or bytes) in the kernel's spelling (0000:0a:00)."""
    text = value.decode() if isinstance(value, bytes) else str(value)
    parts = text.lower().split(":")
    if len(parts) != 3:
        return text.lower()
    domain, bus, device = parts
    return f"{int(domain, 16):04x}:{bus}:{device.split('.')[0]}"


class NvmlPciMap:
    """PCI bus id -> (card index, UUID), asked of NVML only when a kernel Xid needs it."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._cards: dict[str, tuple[int, str | None]] = {}

    def __call__(self, pci: str) -> tuple[int, str | None] | None:
        if pci not in self._cards:
            self._refresh()
        return self._cards.get(pci)

    def _refresh(self) -> None:
        nvml = self._nvml
        cards: dict[str, tuple[int, str | None]] = {}
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                try:
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    bus = pci_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
                    cards[bus] = (index, nvml.nvmlDeviceGetUUID(handle))
                except nvml.NVMLError:
                    continue  # a lost card: its Xid keeps the bus id and no index
        except nvml.NVMLError:
            return
        self._cards = cards
