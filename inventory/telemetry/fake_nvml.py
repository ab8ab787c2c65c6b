"""A fake NVML that a collector uses exactly as it uses the `pynvml` module.

One `FakeNvml` instance stands for the NVML library of one host. It serves a mutable
`FakeHostState` (cards, MIG devices, processes), which the fleet simulator drives, or which a
test builds by hand. Same function names, signatures and return shapes as nvidia-ml-py for the
calls the collector makes; same `NVMLError_*` class names and `value` codes, generated the way
pynvml generates them, so `NVMLError(code)` dispatches to the subclass.

Quirks reproduced on purpose, because production code must survive them:
- memory v2: `total = reserved + used + free`, `reserved` being driver-reserved memory;
  the v1 struct (no `version`) folds reserved into `used`, as the real driver does;
- `usedGpuMemory` is None where NVML reports NVML_VALUE_NOT_AVAILABLE;
- `gpuInstanceId` / `computeInstanceId` are 0xFFFFFFFF outside MIG (pynvml passes the raw value);
- utilization answers NotSupported on a MIG-enabled card and on MIG device handles;
- a lost card (Xid 79) answers GpuIsLost to every call, handle lookup included;
- a process inside another PID namespace is listed by PID but `nvmlSystemGetProcessName`
  answers NotFound (or NoPermission);
- MIG device names read "<product> MIG <profile>", e.g. "NVIDIA H200 MIG 1c.3g.71gb";
- `nvmlEventSetWait_v2` raises NVMLError_Timeout when nothing is pending. It never sleeps:
  simulated time does not pass inside the fake.
"""

from __future__ import annotations

import string
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import NoReturn

# --- constants, values as in nvidia-ml-py -------------------------------------------------

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_COMPUTEMODE_DEFAULT = 0
NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1
NVML_COMPUTEMODE_PROHIBITED = 2
NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3
NVML_COMPUTEMODE_COUNT = 4

NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1

nvmlMemory_v2 = 0x02000028

nvmlEventTypeNone = 0x0000000000000000
nvmlEventTypeSingleBitEccError = 0x0000000000000001
nvmlEventTypeDoubleBitEccError = 0x0000000000000002
nvmlEventTypeXidCriticalError = 0x0000000000000008

# The raw "not available" value of a c_uint field (pynvml does not translate these two).
NVML_VALUE_NOT_AVAILABLE_UINT = 0xFFFFFFFF
_NOT_AVAILABLE_UINT = NVML_VALUE_NOT_AVAILABLE_UINT

_EVENT_QUEUE_LIMIT = 1024  # the real driver's queue is bounded too; old events are lost


# --- errors, generated as pynvml generates them -------------------------------------------


class NVMLError(Exception):
    _valClassMapping: dict[int, type[NVMLError]] = {}
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    value: int

    def __new__(cls, value: int):
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    # pynvml compares errors by code (and so leaves them unhashable); keep that.
    def __eq__(self, other: object) -> bool:
        return self.value == getattr(other, "value", None)

    __hash__ = None  # type: ignore[assignment]


def _error_class_name(constant_name: str) -> str:
    # NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost, the rule in pynvml
    words = constant_name.replace("NVML_ERROR_", "")
    return "NVMLError_" + string.capwords(words, "_").replace("_", "")


def _generate_error_classes() -> dict[str, type[NVMLError]]:
    module = sys.modules[__name__]
    generated: dict[str, type[NVMLError]] = {}
    for constant_name in [n for n in dir(module) if n.startswith("NVML_ERROR_")]:
        code = getattr(module, constant_name)
        error_class = type(
            _error_class_name(constant_name), (NVMLError,), {"__new__": _fixed_code_new(code)}
        )
        error_class.__module__ = __name__
        setattr(module, error_class.__name__, error_class)
        NVMLError._valClassMapping[code] = error_class
        generated[error_class.__name__] = error_class
    return generated


def _fixed_code_new(code: int):
    # NVMLError_NotSupported() needs no argument: the subclass knows its code
    def __new__(cls, *args):
        return NVMLError.__new__(cls, code)

    return __new__


ERROR_CLASSES = _generate_error_classes()


def nvmlExceptionClass(nvmlErrorCode: int) -> type[NVMLError]:
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError(f"nvmlErrorCode {nvmlErrorCode} is not valid")
    return NVMLError._valClassMapping[nvmlErrorCode]


# --- structs: same attribute names as pynvml's ctypes structs -----------------------------


class c_nvmlMemory_t:
    __slots__ = ("free", "total", "used")

    def __init__(self, total: int, free: int, used: int) -> None:
        self.total, self.free, self.used = total, free, used


class c_nvmlMemory_v2_t:
    __slots__ = ("free", "reserved", "total", "used", "version")

    def __init__(self, version: int, total: int, reserved: int, free: int, used: int) -> None:
        self.version, self.total, self.reserved, self.free, self.used = (
            version,
            total,
            reserved,
            free,
            used,
        )


class c_nvmlUtilization_t:
    __slots__ = ("gpu", "memory")

    def __init__(self, gpu: int, memory: int) -> None:
        self.gpu, self.memory = gpu, memory


class c_nvmlProcessInfo_t:
    """Shaped like pynvml's friendly object built from c_nvmlProcessInfo_v3_t."""

    __slots__ = ("computeInstanceId", "gpuInstanceId", "pid", "usedGpuMemory")

    def __init__(self, pid: int, used: int | None, gi: int, ci: int) -> None:
        self.pid, self.usedGpuMemory, self.gpuInstanceId, self.computeInstanceId = (
            pid,
            used,
            gi,
            ci,
        )


class c_nvmlPciInfo_t:
    __slots__ = ("bus", "busId", "device", "domain")

    def __init__(self, domain: int, bus: int, device: int) -> None:
        self.domain, self.bus, self.device = domain, bus, device
        # pynvml decodes the char array: "00000000:0A:00.0"
        self.busId = f"{domain:08X}:{bus:02X}:{device:02X}.0"


class c_nvmlGpuInstancePlacement_t:
    __slots__ = ("size", "start")

    def __init__(self, start: int, size: int) -> None:
        self.start, self.size = start, size


class c_nvmlGpuInstanceInfo_t:
    __slots__ = ("device", "id", "placement", "profileId")

    def __init__(self, device: FakeDeviceHandle, gi: int, placement) -> None:
        self.device, self.id, self.profileId, self.placement = device, gi, 0, placement


@dataclass(frozen=True, slots=True)
class FakeGpuInstanceHandle:
    card_index: int
    gpu_instance_id: int


class c_nvmlEventData_t:
    __slots__ = ("computeInstanceId", "device", "eventData", "eventType", "gpuInstanceId")

    def __init__(self, device: FakeDeviceHandle, event_type: int, data: int, gi: int, ci: int):
        self.device, self.eventType, self.eventData = device, event_type, data
        self.gpuInstanceId, self.computeInstanceId = gi, ci


# --- the state the fake serves ------------------------------------------------------------


@dataclass(slots=True, eq=False)
class FakeProcess:
    pid: int
    name: str
    used_bytes: int
    kind: str = "compute"  # "compute", or "mps" for an MPS client (listed by both calls)
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_visible: bool = True  # False: usedGpuMemory comes back None
    name_error: int | None = None  # NVML code nvmlSystemGetProcessName raises for this PID


@dataclass(slots=True, eq=False)
class FakeMigDevice:
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile: str  # as nvidia-smi -L prints it: "3g.71gb", "1c.3g.71gb"
    total_bytes: int
    base_used_bytes: int  # the instance's own overhead with no process on it
    start_slot: int  # the GPU instance's placement in memory slices (nvidia-smi mig -lgi)
    size_slots: int


@dataclass(slots=True, eq=False)
class FakeCard:
    uuid: str
    name: str
    total_bytes: int
    reserved_bytes: int
    base_used_bytes: int = 0  # driver/context overhead counted in "used"
    util_gpu: int = 0
    util_memory: int = 0
    mig_current: int | None = None  # None: the card has no MIG (NotSupported)
    mig_pending: int | None = None
    max_mig_devices: int = 0
    mig_devices: list[FakeMigDevice] = field(default_factory=list)
    compute_mode: int = NVML_COMPUTEMODE_DEFAULT
    processes: list[FakeProcess] = field(default_factory=list)
    lost: bool = False
    events_supported: bool = True
    failing: dict[str, int] = field(default_factory=dict)  # call name -> NVML error code
    pci_bus: int | None = None  # None: one bus per card index, from 0x18 as on a DGX board

    @property
    def mig_enabled(self) -> bool:
        return self.mig_current == NVML_DEVICE_MIG_ENABLE

    def instance_used_bytes(self, gpu_instance_id: int) -> int:
        base = next(
            (m.base_used_bytes for m in self.mig_devices if m.gpu_instance_id == gpu_instance_id),
            0,
        )
        return base + sum(
            p.used_bytes for p in self.processes if p.gpu_instance_id == gpu_instance_id
        )

    def used_bytes(self) -> int:
        process_bytes = sum(p.used_bytes for p in self.processes)
        if self.mig_enabled:
            # CIs of one GI share its memory: count each GI's overhead once
            overhead = {m.gpu_instance_id: m.base_used_bytes for m in self.mig_devices}
            return process_bytes + sum(overhead.values())
        return process_bytes + (self.base_used_bytes if self.processes else 0)


@dataclass(slots=True, eq=False)
class FakeEventSet:
    registrations: dict[int, int] = field(default_factory=dict)  # card index -> event mask
    pending: deque = field(default_factory=lambda: deque(maxlen=_EVENT_QUEUE_LIMIT))


@dataclass(slots=True, eq=False)
class FakeHostState:
    cards: list[FakeCard]
    driver_version: str = "590.48.01"
    driver_loaded: bool = True
    init_error: int | None = None  # an NVML code nvmlInit raises, e.g. a version mismatch
    # Symbols an older libnvidia-ml.so lacks, e.g. {"nvmlDeviceGetComputeRunningProcesses_v3"}:
    # the versioned call answers FunctionNotFound, the unversioned one a library mismatch.
    missing_functions: frozenset[str] = frozenset()
    event_sets: list[FakeEventSet] = field(default_factory=list)
    # Root, or an unprivileged agent as the shipped unit runs it: NVML hands GPU instance
    # handles, and lists MIG instances' processes on the parent card, to privileged callers only.
    privileged: bool = False

    def post_xid(self, card_index: int, xid: int, gi: int | None = None, ci: int | None = None):
        """Deliver an Xid to every event set registered for it, as the driver would."""
        for event_set in self.event_sets:
            mask = event_set.registrations.get(card_index, 0)
            if mask & nvmlEventTypeXidCriticalError:
                event_set.pending.append((card_index, nvmlEventTypeXidCriticalError, xid, gi, ci))


@dataclass(frozen=True, slots=True)
class FakeDeviceHandle:
    card_index: int
    mig_index: int | None = None


class NVMLLibraryMismatchError(Exception):
    """What nvidia-ml-py raises from an unversioned call whose versioned symbol the library
    lacks: a plain Exception, not an NVMLError."""


def _uint_or_na(value: int | None) -> int:
    return _NOT_AVAILABLE_UINT if value is None else value


def _raise(code: int) -> NoReturn:
    raise NVMLError(code)


# --- the module-shaped fake ---------------------------------------------------------------


class FakeNvml:
    """Use like `pynvml`: `nvml = FakeNvml(state); nvml.nvmlInit(); nvml.nvmlDeviceGetCount()`."""

    def __init__(self, state: FakeHostState) -> None:
        self.state = state
        self._init_count = 0
        self._handles: dict[tuple[int, int | None], FakeDeviceHandle] = {}

    # lifecycle ---------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if not self.state.driver_loaded:
            _raise(NVML_ERROR_DRIVER_NOT_LOADED)
        if self.state.init_error is not None:
            _raise(self.state.init_error)
        self._init_count += 1

    def nvmlShutdown(self) -> None:
        self._require_init()
        self._init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._require_init()
        return self.state.driver_version

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._require_init()
        for card in self.state.cards:
            if card.lost:
                continue
            for process in card.processes:
                if process.pid == pid:
                    if process.name_error is not None:
                        _raise(process.name_error)
                    return process.name
        _raise(NVML_ERROR_NOT_FOUND)

    # devices -----------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        return len(self.state.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDeviceHandle:
        self._require_init()
        if not 0 <= index < len(self.state.cards):
            _raise(NVML_ERROR_INVALID_ARGUMENT)
        self._card(FakeDeviceHandle(index), "nvmlDeviceGetHandleByIndex")
        return self._handle(index, None)

    def nvmlDeviceGetIndex(self, handle: FakeDeviceHandle) -> int:
        self._card(handle, "nvmlDeviceGetIndex")
        return handle.card_index

    def nvmlDeviceGetUUID(self, handle: FakeDeviceHandle) -> str:
        card = self._card(handle, "nvmlDeviceGetUUID")
        if handle.mig_index is not None:
            return self._mig(card, handle).uuid
        return card.uuid

    def nvmlDeviceGetName(self, handle: FakeDeviceHandle) -> str:
        card = self._card(handle, "nvmlDeviceGetName")
        if handle.mig_index is not None:
            return f"{card.name} MIG {self._mig(card, handle).profile}"
        return card.name

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDeviceHandle, version: int | None = None):
        card = self._card(handle, "nvmlDeviceGetMemoryInfo")
        if version and version != nvmlMemory_v2:
            _raise(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if handle.mig_index is not None:
            mig = self._mig(card, handle)
            total, reserved = mig.total_bytes, 0
            used = min(card.instance_used_bytes(mig.gpu_instance_id), total)
        else:
            total, reserved = card.total_bytes, card.reserved_bytes
            used = min(card.used_bytes(), total - reserved)
        free = total - reserved - used
        if not version:
            return c_nvmlMemory_t(total=total, free=free, used=used + reserved)
        return c_nvmlMemory_v2_t(version, total, reserved, free, used)

    def nvmlDeviceGetPciInfo(self, handle: FakeDeviceHandle) -> c_nvmlPciInfo_t:
        card = self._card(handle, "nvmlDeviceGetPciInfo")
        bus = card.pci_bus if card.pci_bus is not None else 0x18 + handle.card_index
        return c_nvmlPciInfo_t(0, bus, 0)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeDeviceHandle) -> c_nvmlUtilization_t:
        card = self._card(handle, "nvmlDeviceGetUtilizationRates")
        if handle.mig_index is not None or card.mig_enabled:
            _raise(NVML_ERROR_NOT_SUPPORTED)
        return c_nvmlUtilization_t(card.util_gpu, card.util_memory)

    def nvmlDeviceGetComputeMode(self, handle: FakeDeviceHandle) -> int:
        card = self._card(handle, "nvmlDeviceGetComputeMode")
        return card.compute_mode

    def nvmlDeviceGetMigMode(self, handle: FakeDeviceHandle) -> list[int]:
        card = self._card(handle, "nvmlDeviceGetMigMode")
        if handle.mig_index is not None:
            _raise(NVML_ERROR_INVALID_ARGUMENT)
        if card.mig_current is None:
            _raise(NVML_ERROR_NOT_SUPPORTED)
        pending = card.mig_current if card.mig_pending is None else card.mig_pending
        return [card.mig_current, pending]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeDeviceHandle) -> int:
        card = self._card(handle, "nvmlDeviceGetMaxMigDeviceCount")
        if card.mig_current is None:
            _raise(NVML_ERROR_NOT_SUPPORTED)
        return card.max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeDeviceHandle, index: int):
        card = self._card(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        if card.mig_current is None:
            _raise(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= index < card.max_mig_devices:
            _raise(NVML_ERROR_INVALID_ARGUMENT)
        if not card.mig_enabled or index >= len(card.mig_devices):
            _raise(NVML_ERROR_NOT_FOUND)
        return self._handle(handle.card_index, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeDeviceHandle) -> int:
        card = self._card(handle, "nvmlDeviceGetGpuInstanceId")
        if handle.mig_index is None:
            _raise(NVML_ERROR_INVALID_ARGUMENT)
        return self._mig(card, handle).gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeDeviceHandle) -> int:
        card = self._card(handle, "nvmlDeviceGetComputeInstanceId")
        if handle.mig_index is None:
            _raise(NVML_ERROR_INVALID_ARGUMENT)
        return self._mig(card, handle).compute_instance_id

    # nvidia-ml-py's unversioned process lists are its _v3 calls; _v2 has the same fields.
    def nvmlDeviceGetGpuInstanceById(self, device: FakeDeviceHandle, id: int):
        card = self._card(device, "nvmlDeviceGetGpuInstanceById")
        if device.mig_index is not None or card.mig_current is None:
            _raise(NVML_ERROR_NOT_SUPPORTED)
        if not self.state.privileged:
            _raise(NVML_ERROR_NO_PERMISSION)
        if not any(m.gpu_instance_id == id for m in card.mig_devices if card.mig_enabled):
            _raise(NVML_ERROR_NOT_FOUND)
        return FakeGpuInstanceHandle(device.card_index, id)

    def nvmlGpuInstanceGetInfo(self, gpuInstance: FakeGpuInstanceHandle):
        card = self._card(self._handle(gpuInstance.card_index, None), "nvmlGpuInstanceGetInfo")
        mig = next(
            (m for m in card.mig_devices if m.gpu_instance_id == gpuInstance.gpu_instance_id),
            None,
        )
        if mig is None or not card.mig_enabled:
            _raise(NVML_ERROR_INVALID_ARGUMENT)  # the instance was destroyed under the handle
        placement = c_nvmlGpuInstancePlacement_t(mig.start_slot, mig.size_slots)
        return c_nvmlGpuInstanceInfo_t(
            self._handle(gpuInstance.card_index, None), mig.gpu_instance_id, placement
        )

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeDeviceHandle):
        return self._unversioned("nvmlDeviceGetComputeRunningProcesses_v3", handle)

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: FakeDeviceHandle):
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v3", handle, "compute")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: FakeDeviceHandle):
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v2", handle, "compute")

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: FakeDeviceHandle):
        return self._unversioned("nvmlDeviceGetMPSComputeRunningProcesses_v3", handle)

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: FakeDeviceHandle):
        return self._processes("nvmlDeviceGetMPSComputeRunningProcesses_v3", handle, "mps")

    def nvmlDeviceGetMPSComputeRunningProcesses_v2(self, handle: FakeDeviceHandle):
        return self._processes("nvmlDeviceGetMPSComputeRunningProcesses_v2", handle, "mps")

    def _processes(self, call: str, handle: FakeDeviceHandle, kind: str):
        if call in self.state.missing_functions:
            _raise(NVML_ERROR_FUNCTION_NOT_FOUND)
        # a failure set for the unversioned name applies to every version, as before
        card = self._card(handle, call.rsplit("_v", 1)[0])
        return self._process_infos(card, handle, kind)

    def _unversioned(self, versioned: str, handle: FakeDeviceHandle):
        try:
            return getattr(self, versioned)(handle)
        except NVMLError as error:
            if error.value != NVML_ERROR_FUNCTION_NOT_FOUND:
                raise
            raise NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML "
                f"lib version. Either use matching pyNVML and NVML lib versions or use a "
                f"versioned function such as {versioned.rsplit('_v', 1)[0]}_v2"
            ) from None

    # events ------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._require_init()
        event_set = FakeEventSet()
        self.state.event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle, eventTypes: int, eventSet: FakeEventSet) -> None:
        card = self._card(handle, "nvmlDeviceRegisterEvents")
        if handle.mig_index is not None or not card.events_supported:
            _raise(NVML_ERROR_NOT_SUPPORTED)
        registrations = eventSet.registrations
        registrations[handle.card_index] = registrations.get(handle.card_index, 0) | eventTypes

    def nvmlEventSetWait_v2(self, eventSet: FakeEventSet, timeoutms: int) -> c_nvmlEventData_t:
        self._require_init()
        if not eventSet.pending:
            _raise(NVML_ERROR_TIMEOUT)
        card_index, event_type, data, gi, ci = eventSet.pending.popleft()
        return c_nvmlEventData_t(
            self._handle(card_index, None), event_type, data, _uint_or_na(gi), _uint_or_na(ci)
        )

    def nvmlEventSetWait(self, eventSet: FakeEventSet, timeoutms: int) -> c_nvmlEventData_t:
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: FakeEventSet) -> None:
        self._require_init()
        if eventSet in self.state.event_sets:
            self.state.event_sets.remove(eventSet)

    # internals ---------------------------------------------------------------------------

    def _require_init(self) -> None:
        if self._init_count <= 0:
            _raise(NVML_ERROR_UNINITIALIZED)

    def _handle(self, card_index: int, mig_index: int | None) -> FakeDeviceHandle:
        key = (card_index, mig_index)
        handle = self._handles.get(key)
        if handle is None:
            handle = self._handles[key] = FakeDeviceHandle(card_index, mig_index)
        return handle

    def _card(self, handle: FakeDeviceHandle, call: str) -> FakeCard:
        if self._init_count <= 0:
            _raise(NVML_ERROR_UNINITIALIZED)
        cards = self.state.cards
        if not isinstance(handle, FakeDeviceHandle) or handle.card_index >= len(cards):
            _raise(NVML_ERROR_INVALID_ARGUMENT)
        card = cards[handle.card_index]
        if card.lost:
            _raise(NVML_ERROR_GPU_IS_LOST)
        if card.failing and call in card.failing:
            _raise(card.failing[call])
        return card

    @staticmethod
    def _mig(card: FakeCard, handle: FakeDeviceHandle) -> FakeMigDevice:
        if not card.mig_enabled or handle.mig_index >= len(card.mig_devices):
            _raise(NVML_ERROR_NOT_FOUND)  # the instance was destroyed under the handle
        return card.mig_devices[handle.mig_index]

    def _process_infos(self, card: FakeCard, handle: FakeDeviceHandle, kind: str):
        # As the driver does (seen on an H200, driver 580.159.04): the compute list holds every
        # compute process, MPS clients included; the MPS list holds the clients alone.
        selected = [p for p in card.processes if kind == "compute" or p.kind == kind]
        if handle.mig_index is not None:
            mig = self._mig(card, handle)
            selected = [
                p
                for p in selected
                if p.gpu_instance_id == mig.gpu_instance_id
                and p.compute_instance_id == mig.compute_instance_id
            ]
        elif card.mig_enabled and not self.state.privileged:
            selected = [p for p in selected if p.gpu_instance_id is None]
        return [
            c_nvmlProcessInfo_t(
                p.pid,
                p.used_bytes if p.memory_visible else None,
                _uint_or_na(p.gpu_instance_id),
                _uint_or_na(p.compute_instance_id),
            )
            for p in selected
        ]


# The fake answers `nvml.NVMLError_GpuIsLost`, `nvml.NVML_COMPUTEMODE_DEFAULT`, ... like the module.
for _name, _value in list(globals().items()):
    if _name.startswith(("NVML_", "NVMLError", "nvmlMemory_", "nvmlEventType")):
        setattr(FakeNvml, _name, _value)
del _name, _value
FakeNvml.nvmlExceptionClass = staticmethod(nvmlExceptionClass)
FakeNvml.NVMLLibraryMismatchError = NVMLLibraryMismatchError
