"""One poll of a GPU host through NVML: per card, per MIG device, per process.

The NVML module is a parameter: production passes `pynvml` (nvidia-ml-py), tests and the demo
pass `inventory.telemetry.fake_nvml.FakeNvml`. Nothing escapes a poll: every NVML failure
becomes a `CollectorFault` and the rest of the host is still read.

Static facts (handles, UUIDs, names, MIG layout, which calls a card does not support) are
cached after the first poll and discovered again when a card is lost, its handle goes stale,
its MIG mode changes or the device count changes. A steady-state poll makes six NVML calls per
card plus one per MIG device, and one name lookup per new PID.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inventory.telemetry.readings import (
    CardReading,
    CollectorFault,
    MigDeviceReading,
    PollResult,
    ProcessReading,
    TelemetryEvent,
)
from inventory.telemetry.xid_events import XidEventReader

__all__ = [
    "CardReading",
    "CollectorFault",
    "MigDeviceReading",
    "NvmlCollector",
    "PollResult",
    "ProcessReading",
]

_NOT_AVAILABLE_UINT = 0xFFFFFFFF
_NOT_AVAILABLE_ULONGLONG = 0xFFFFFFFFFFFFFFFF
# Errors after which a cached handle cannot be trusted: look the card up again next poll.
_STALE_HANDLE_ERRORS = frozenset({"NVMLError_InvalidArgument", "NVMLError_NotFound"})
# What a host-level failure means, in words on-call can act on.
HOST_FAULTS = {
    "NVMLError_LibRmVersionMismatch": "the NVIDIA kernel driver and the NVML library differ in "
    "version (a driver upgraded but not loaded): reboot, or reload the nvidia kernel modules",
    "NVMLError_DriverNotLoaded": "no NVIDIA kernel driver is loaded on this host",
    "NVMLError_LibraryNotFound": "the NVML library (libnvidia-ml.so.1) is not installed",
    "NVMLError_NoPermission": "the agent may not use NVML here: run it as a user with access "
    "to /dev/nvidia*",
    "NVMLError_ResetRequired": "the GPU needs a reset (nvidia-smi -r) once its processes have "
    "stopped; it is not read until then",
}
# A driver or binding without nvmlMemory_v2 answers one of these to the v2 call.
_NO_MEMORY_V2 = frozenset(
    {"NVMLError_ArgumentVersionMismatch", "NVMLError_FunctionNotFound", "NVMLError_NotSupported"}
)
# Each process list's versions, newest first. A driver older than nvidia-ml-py lacks the newer
# symbols: the binding answers FunctionNotFound to a versioned call, and to an unversioned one
# NVMLLibraryMismatchError, which is no NVMLError. So the collector names the versions itself
# and keeps the newest the library has.
PROCESS_LISTS = (
    ("compute", ("nvmlDeviceGetComputeRunningProcesses_v3",
                 "nvmlDeviceGetComputeRunningProcesses_v2")),
    ("mps", ("nvmlDeviceGetMPSComputeRunningProcesses_v3",
             "nvmlDeviceGetMPSComputeRunningProcesses_v2")),
)  # fmt: skip
LIBRARY_MISMATCH = "NVMLLibraryMismatchError"
RESET_RECHECK_POLLS = 30  # a card that needs a reset is asked again this often, not every poll
MIG_REDISCOVER_POLLS = 60  # MIG instances created next to running ones show up within this
MIG_PLACEMENT_DENIED = (
    "MIG placement needs a privileged NVML caller (GPU instance handles): the agent reports "
    "each instance's profile and the console infers where its memory slices start"
)
_MIG_NAME_MARKER = " MIG "


class _CardGone(Exception):
    """Stop reading this card in this poll: it is lost, its handle went stale, or it needs a
    reset (`keep`: its static facts stay, it is asked again after RESET_RECHECK_POLLS)."""

    def __init__(self, lost: bool, keep: bool = False) -> None:
        super().__init__()
        self.lost = lost
        self.keep = keep


def _missing_function(call: str, older: str | None) -> str:
    """Said once per card, when the library is found to lack `call`."""
    if older is not None:
        return (
            f"this NVML library has no {call} (a driver older than nvidia-ml-py): "
            f"{older} is read instead"
        )
    return (
        f"this NVML library has no {call} nor an older version of it: this card's processes "
        "cannot be read until the driver or nvidia-ml-py is changed to match"
    )


def _explained(error: str, exc: Exception) -> str:
    meaning = HOST_FAULTS.get(error)
    return f"{meaning} ({exc})" if meaning else str(exc)


@dataclass(slots=True)
class _MigStatic:
    index: int
    handle: Any
    uuid: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    profile: str | None
    start_slot: int | None = None
    size_slots: int | None = None


@dataclass(slots=True)
class _CardStatic:
    handle: Any
    uuid: str | None = None
    name: str | None = None
    unsupported: set[str] = field(default_factory=set)
    mig_devices: list[_MigStatic] | None = None  # None: not enumerated for the current mode
    mig_age: int = 0  # polls since the MIG layout was enumerated
    reset_wait: int = 0  # polls left before a card that needed a reset is asked again
    memory_v1: bool = False  # the driver or bindings have no nvmlMemory_v2
    missing: set[str] = field(default_factory=set)  # versioned calls the library lacks
    mig_by_instance: dict[tuple[int, int], str | None] = field(default_factory=dict)
    mig_placement_denied: bool = False  # an unprivileged caller: GPU instance handles refused


class _PollContext:
    """Where one poll records its faults; knows which card is being read."""

    __slots__ = ("card_index", "card_uuid", "faults", "ts")

    def __init__(self, ts: float) -> None:
        self.ts = ts
        self.faults: list[CollectorFault] = []
        self.card_index: int | None = None
        self.card_uuid: str | None = None

    def fault(self, call: str, error: str, message: str) -> None:
        self.faults.append(
            CollectorFault(self.card_index, call, error, message, self.card_uuid, self.ts)
        )


def _instance_id(value: Any) -> int | None:
    return None if value is None or value >= _NOT_AVAILABLE_UINT else int(value)


def _profile_from_name(name: str | None) -> str | None:
    # NVML names MIG devices "<product> MIG <profile>", e.g. "NVIDIA H200 MIG 1c.3g.71gb"
    if not name or _MIG_NAME_MARKER not in name:
        return None
    return name.rsplit(_MIG_NAME_MARKER, 1)[1].strip() or None


class NvmlCollector:
    def __init__(
        self,
        nvml: Any,
        host: str,
        *,
        clock: Callable[[], float] = time.time,
        watch_xid: bool = True,
    ) -> None:
        self._nvml = nvml
        self.host = host
        self._clock = clock
        self._initialized = False
        self._driver_version: str | None = None
        self._cards: list[_CardStatic | None] = []
        self._names: dict[int, tuple[str | None, str | None]] = {}
        self._last_known: dict[int, tuple[str | None, str | None]] = {}
        self._lost: set[int] = set()  # cards told lost (an event said so once), by index
        self._xid = XidEventReader(nvml) if watch_xid else None

    # public ------------------------------------------------------------------------------

    def poll(self) -> PollResult:
        started = time.perf_counter()
        ts = self._clock()
        ctx = _PollContext(ts)
        cards: list[CardReading] = []
        events = []
        if self._ensure_initialized(ctx):
            if self._xid is not None:
                # before the cards: an Xid comes out with the poll that finds its card lost
                events, xid_faults = self._xid.drain(ts)
                ctx.faults.extend(xid_faults)
            count = self._device_count(ctx)
            if count is not None:
                if count != len(self._cards):
                    self._forget_all(count)
                seen_pids: set[int] = set()
                for index in range(count):
                    ctx.card_index, ctx.card_uuid = index, None
                    cards.append(self._read_card(index, ctx, seen_pids))
                ctx.card_index = ctx.card_uuid = None
                events += self._lost_cards(ts, cards, events)
                if len(self._names) > len(seen_pids):
                    self._names = {p: v for p, v in self._names.items() if p in seen_pids}
        return PollResult(
            host=self.host,
            ts=ts,
            duration_s=time.perf_counter() - started,
            driver_version=self._driver_version,
            cards=cards,
            faults=ctx.faults,
            events=events,
        )

    def _lost_cards(
        self, ts: float, cards: list[CardReading], xids: list[TelemetryEvent]
    ) -> list[TelemetryEvent]:
        """A `gpu_lost` event for a card the first time it answers GpuIsLost (fallen off the
        bus, lost to a reset): NVML delivers no Xid 79 for every such loss, and without an
        event the card would only be missing from the samples. An Xid 79 said it already."""
        told = {e.card_index for e in xids if e.kind == "xid" and e.detail.get("xid") == 79}
        self._lost |= told
        events = []
        for card in cards:
            if not card.lost:
                self._lost.discard(card.index)
            elif card.index not in self._lost:
                self._lost.add(card.index)
                detail = {"source": "nvml", "error": "NVMLError_GpuIsLost"}
                events.append(TelemetryEvent(ts, "gpu_lost", card.index, card.uuid, detail))
        return events

    def close(self) -> None:
        if self._xid is not None:
            self._xid.close()
        if self._initialized:
            with contextlib.suppress(self._nvml.NVMLError):  # going away either way
                self._nvml.nvmlShutdown()
            self._initialized = False

    # host level --------------------------------------------------------------------------

    def _ensure_initialized(self, ctx: _PollContext) -> bool:
        if self._initialized:
            return True
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            error = type(exc).__name__
            ctx.fault("nvmlInit", error, _explained(error, exc))
            return False
        self._initialized = True
        try:
            self._driver_version = nvml.nvmlSystemGetDriverVersion()
        except nvml.NVMLError as exc:
            ctx.fault("nvmlSystemGetDriverVersion", type(exc).__name__, str(exc))
        return True

    def _device_count(self, ctx: _PollContext) -> int | None:
        nvml = self._nvml
        try:
            return nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            ctx.fault("nvmlDeviceGetCount", type(exc).__name__, str(exc))
            if isinstance(exc, nvml.NVMLError_Uninitialized):
                # driver reloaded under us: handles and event set are void, start over
                self._initialized = False
                self._forget_all(0)
                if self._xid is not None:
                    self._xid.close()
            return None

    def _forget_all(self, count: int) -> None:
        for index in range(len(self._cards)):
            self._forget(index)
        self._cards = [None] * count

    def _forget(self, index: int) -> None:
        # The Xid reader keeps the card's handle: an Xid the driver queues after the loss
        # still names its card (a new registration replaces the handle).
        if index < len(self._cards):
            self._cards[index] = None

    # card level --------------------------------------------------------------------------

    def _attempt(self, ctx: _PollContext, static: _CardStatic | None, call: str, *args: Any):
        """Call NVML; on failure record a fault and return None, or abort the card."""
        nvml = self._nvml
        try:
            return getattr(nvml, call)(*args)
        except nvml.NVMLError as exc:
            return self._failed(ctx, static, call, exc)
        except nvml.NVMLLibraryMismatchError as exc:
            # the binding is newer than the library: a capability missing, not a lost card
            ctx.fault(call, LIBRARY_MISMATCH, str(exc))
            if static is not None:
                static.unsupported.add(call)
            return None

    def _failed(self, ctx: _PollContext, static: _CardStatic | None, call: str, exc: Exception):
        nvml = self._nvml
        error = type(exc).__name__
        if isinstance(exc, nvml.NVMLError_NotSupported) and static is not None:
            static.unsupported.add(call)  # a capability, not an incident: stop asking
            return None
        ctx.fault(call, error, _explained(error, exc))
        lost = isinstance(exc, nvml.NVMLError_GpuIsLost)
        if error == "NVMLError_ResetRequired" and static is not None:
            # a host-level state, not a forgotten card: keep it, ask again later
            static.reset_wait = RESET_RECHECK_POLLS
            raise _CardGone(False, keep=True) from None
        if lost or error in _STALE_HANDLE_ERRORS:
            raise _CardGone(lost) from None
        return None

    def _read_card(self, index: int, ctx: _PollContext, seen_pids: set[int]) -> CardReading:
        static = self._cards[index]
        # a card that is lost now keeps the identity it had when it last answered
        uuid, name = (
            (static.uuid, static.name) if static else self._last_known.get(index, (None, None))
        )
        reading = CardReading(index, uuid, name)
        ctx.card_uuid = uuid
        try:
            if static is not None and static.reset_wait > 0:
                static.reset_wait -= 1
                ctx.fault("nvmlDeviceGetMemoryInfo", "NVMLError_ResetRequired",
                          HOST_FAULTS["NVMLError_ResetRequired"])  # fmt: skip
                return reading
            if static is None:
                static = self._discover(index, ctx)
                reading.uuid, reading.name = static.uuid, static.name
            ctx.card_uuid = static.uuid
            self._read_memory(ctx, static, reading)
            self._read_modes(ctx, static, reading)
            if reading.mig_current == self._nvml.NVML_DEVICE_MIG_ENABLE:
                self._read_mig_devices(ctx, static, reading)
            self._read_processes(ctx, static, reading, seen_pids)
            unsupported = static.unsupported
            if reading.mig_current == self._nvml.NVML_DEVICE_MIG_ENABLE:
                unsupported = unsupported | {"nvmlDeviceGetUtilizationRates"}
            reading.unsupported = tuple(sorted(unsupported))
        except _CardGone as gone:
            reading.lost = gone.lost
            if not gone.keep:
                self._forget(index)
        except Exception as exc:  # a bug or a binding surprise must not stop the host's poll
            ctx.fault("collector", type(exc).__name__, str(exc))
            self._forget(index)
        return reading

    def _discover(self, index: int, ctx: _PollContext) -> _CardStatic:
        handle = self._attempt(ctx, None, "nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            raise _CardGone(False)
        static = _CardStatic(handle)
        ctx.card_uuid = static.uuid = self._attempt(ctx, static, "nvmlDeviceGetUUID", handle)
        static.name = self._attempt(ctx, static, "nvmlDeviceGetName", handle)
        self._cards[index] = static
        self._last_known[index] = (static.uuid, static.name)
        if self._xid is not None:
            # Any refusal is told, NotSupported too (a card without Xid events): the event
            # set's Xids are then missing, and only the kernel log's can arrive.
            fault = self._xid.register(index, handle, static.uuid, ctx.ts)
            if fault is not None:
                ctx.faults.append(fault)
        return static

    def _read_memory(self, ctx: _PollContext, static: _CardStatic, reading: CardReading) -> None:
        nvml = self._nvml
        if not static.memory_v1:
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(static.handle, nvml.nvmlMemory_v2)
            except TypeError:  # bindings older than the version argument
                static.memory_v1 = True
            except nvml.NVMLError as exc:
                if type(exc).__name__ not in _NO_MEMORY_V2:
                    self._failed(ctx, static, "nvmlDeviceGetMemoryInfo", exc)
                    return
                static.memory_v1 = True  # a driver before memory v2 (R510)
            else:
                reading.total_bytes = memory.total
                reading.reserved_bytes = memory.reserved
                reading.used_bytes = memory.used
                reading.free_bytes = memory.free
                return
        memory = self._attempt(ctx, static, "nvmlDeviceGetMemoryInfo", static.handle)
        if memory is not None:
            # v1 counts the driver's reserve as used; the reserve itself is not told apart
            reading.total_bytes, reading.used_bytes = memory.total, memory.used
            reading.free_bytes = memory.free

    def _read_modes(self, ctx: _PollContext, static: _CardStatic, reading: CardReading) -> None:
        handle, unsupported = static.handle, static.unsupported
        if "nvmlDeviceGetMigMode" not in unsupported:
            modes = self._attempt(ctx, static, "nvmlDeviceGetMigMode", handle)
            if modes is not None:
                reading.mig_current, reading.mig_pending = modes[0], modes[1]
        if reading.mig_current != self._nvml.NVML_DEVICE_MIG_ENABLE:
            static.mig_devices, static.mig_by_instance = None, {}
            if "nvmlDeviceGetUtilizationRates" not in unsupported:
                util = self._attempt(ctx, static, "nvmlDeviceGetUtilizationRates", handle)
                if util is not None:
                    reading.util_gpu, reading.util_memory = util.gpu, util.memory
        # else: NVML has no card-wide utilization under MIG (NotSupported); it stays None
        if "nvmlDeviceGetComputeMode" not in unsupported:
            reading.compute_mode = self._attempt(ctx, static, "nvmlDeviceGetComputeMode", handle)

    def _read_mig_devices(self, ctx: _PollContext, static: _CardStatic, reading: CardReading):
        static.mig_age += 1
        if static.mig_devices is None or static.mig_age > MIG_REDISCOVER_POLLS:
            # also every MIG_REDISCOVER_POLLS: an instance created beside the running ones
            # changes no mode and removes no handle, nothing else would notice it
            self._enumerate_mig(ctx, static)
            static.mig_age = 0
        v2 = self._nvml.nvmlMemory_v2
        for mig in static.mig_devices or ():
            row = MigDeviceReading(
                mig.index,
                mig.uuid,
                mig.gpu_instance_id,
                mig.compute_instance_id,
                mig.profile,
                mig.start_slot,
                mig.size_slots,
            )
            try:
                memory = self._attempt(ctx, static, "nvmlDeviceGetMemoryInfo", mig.handle, v2)
            except _CardGone as gone:
                if gone.lost:
                    raise
                # a MIG instance vanished (repartition): enumerate again, keep the card
                static.mig_devices, static.mig_by_instance = None, {}
                break
            if memory is not None:
                row.total_bytes, row.reserved_bytes = memory.total, memory.reserved
                row.used_bytes, row.free_bytes = memory.used, memory.free
            reading.mig_devices.append(row)

    def _enumerate_mig(self, ctx: _PollContext, static: _CardStatic) -> None:
        nvml = self._nvml
        devices: list[_MigStatic] = []
        placements: dict[int, tuple[int, int] | None] = {}
        slots = self._attempt(ctx, static, "nvmlDeviceGetMaxMigDeviceCount", static.handle) or 0
        for slot in range(slots):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(static.handle, slot)
            except nvml.NVMLError_NotFound:
                continue  # an empty slot, the normal case
            except nvml.NVMLError as exc:
                ctx.fault("nvmlDeviceGetMigDeviceHandleByIndex", type(exc).__name__, str(exc))
                if isinstance(exc, nvml.NVMLError_GpuIsLost):
                    raise _CardGone(True) from None
                continue
            gi = self._attempt(ctx, static, "nvmlDeviceGetGpuInstanceId", handle)
            ci = self._attempt(ctx, static, "nvmlDeviceGetComputeInstanceId", handle)
            uuid = self._attempt(ctx, static, "nvmlDeviceGetUUID", handle)
            name = self._attempt(ctx, static, "nvmlDeviceGetName", handle)
            if gi is not None and gi not in placements:
                placements[gi] = self._gpu_instance_placement(ctx, static, gi)
            start, size = placements.get(gi) or (None, None)
            devices.append(
                _MigStatic(slot, handle, uuid, gi, ci, _profile_from_name(name), start, size)
            )
        static.mig_devices = devices
        static.mig_by_instance = {
            (d.gpu_instance_id, d.compute_instance_id): d.uuid
            for d in devices
            if d.gpu_instance_id is not None and d.compute_instance_id is not None
        }

    def _gpu_instance_placement(
        self, ctx: _PollContext, static: _CardStatic, gpu_instance_id: int
    ) -> tuple[int, int] | None:
        """(start, size) of a GPU instance's memory slices. NVML gives them through the GPU
        instance's handle, which it hands to privileged callers only: an unprivileged agent
        is told so once and reports none."""
        if static.mig_placement_denied or "nvmlDeviceGetGpuInstanceById" in static.unsupported:
            return None
        nvml = self._nvml
        try:
            instance = nvml.nvmlDeviceGetGpuInstanceById(static.handle, gpu_instance_id)
            placement = nvml.nvmlGpuInstanceGetInfo(instance).placement
        except nvml.NVMLError_NoPermission:
            static.mig_placement_denied = True
            ctx.fault("nvmlDeviceGetGpuInstanceById", "NVMLError_NoPermission",
                      MIG_PLACEMENT_DENIED)  # fmt: skip
            return None
        except nvml.NVMLError as exc:
            return self._failed(ctx, static, "nvmlDeviceGetGpuInstanceById", exc)
        return int(placement.start), int(placement.size)

    def _read_processes(
        self, ctx: _PollContext, static: _CardStatic, reading: CardReading, seen: set[int]
    ) -> None:
        # The driver lists an MPS client in both lists, with the same memory: one reading per
        # PID, tagged "mps" when the MPS list has it, or the card's processes count it twice.
        listed: dict[int, tuple[str, Any, _MigStatic | None]] = {}
        for kind, versions in PROCESS_LISTS:
            for info in self._process_list(ctx, static, versions) or ():
                listed[info.pid] = (kind, info, None)
        for kind, info, mig in self._mig_processes(ctx, static):
            known = listed.get(info.pid)
            # the MPS list wins over the compute list, as on the card
            listed[info.pid] = (known[0] if known and known[0] == "mps" else kind, info, mig)
        by_instance = static.mig_by_instance
        for pid, (kind, info, mig) in listed.items():
            seen.add(pid)
            name, name_error = self._process_name(pid, ctx)
            used = info.usedGpuMemory
            if used is not None and used >= _NOT_AVAILABLE_ULONGLONG:
                used = None
            gi = _instance_id(info.gpuInstanceId)
            ci = _instance_id(info.computeInstanceId)
            if mig is not None:  # listed on the instance's own handle: it is on that instance
                gi, ci = mig.gpu_instance_id, mig.compute_instance_id
            mig_uuid = by_instance.get((gi, ci)) if gi is not None else None
            reading.processes.append(
                ProcessReading(pid, kind, name, name_error, used, gi, ci, mig_uuid)
            )

    def _mig_processes(self, ctx: _PollContext, static: _CardStatic):
        """(kind, info, MIG device) of each process on each MIG device of the card, read on the
        device's own handle: on the parent card NVML lists them to privileged callers only."""
        nvml = self._nvml
        for mig in static.mig_devices or ():
            for kind, versions in PROCESS_LISTS:
                family = versions[0].rsplit("_v", 1)[0]
                call = next((v for v in versions if v not in static.missing), None)
                if call is None or family in static.unsupported:
                    continue
                try:
                    infos = getattr(nvml, call)(mig.handle)
                except nvml.NVMLError_NotSupported:
                    continue
                except nvml.NVMLError as exc:
                    try:
                        self._failed(ctx, static, family, exc)
                    except _CardGone as gone:
                        if gone.lost:
                            raise
                        # the instance vanished (repartition): enumerate again, keep the card
                        static.mig_devices, static.mig_by_instance = None, {}
                        return
                    continue
                for info in infos:
                    yield kind, info, mig

    def _process_list(self, ctx: _PollContext, static: _CardStatic, versions: tuple[str, ...]):
        """The newest version of a process list the library has; None when it has none."""
        nvml = self._nvml
        # Failures and capabilities are named by the list (as nvidia-smi and on-call know it),
        # a missing symbol by its version.
        family = versions[0].rsplit("_v", 1)[0]
        if family in static.unsupported:
            return None
        for call in versions:
            if call in static.missing:
                continue
            try:
                return getattr(nvml, call)(static.handle)
            except nvml.NVMLError_FunctionNotFound:
                static.missing.add(call)
                older = next((v for v in versions if v not in static.missing), None)
                ctx.fault(call, LIBRARY_MISMATCH, _missing_function(call, older))
            except nvml.NVMLError as exc:
                return self._failed(ctx, static, family, exc)
        static.unsupported.add(family)
        return None

    def _process_name(self, pid: int, ctx: _PollContext) -> tuple[str | None, str | None]:
        cached = self._names.get(pid)
        if cached is not None:
            return cached
        nvml = self._nvml
        try:
            result: tuple[str | None, str | None] = (nvml.nvmlSystemGetProcessName(pid), None)
        except nvml.NVMLError as exc:
            # Containers: NVML lists host PIDs this namespace cannot name. Said once per PID.
            result = (None, type(exc).__name__)
            ctx.fault("nvmlSystemGetProcessName", result[1], f"pid {pid}: {exc}")
        self._names[pid] = result
        return result
