"""What one poll of a GPU host yields: plain dataclasses, no behaviour.

Memory is always in bytes, timestamps are POSIX epoch seconds (UTC) as floats. A field is None
when the value could not be read (the reason is a CollectorFault) or does not exist on that
device (for example utilization on a MIG-enabled card).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ProcessKind = Literal["compute", "mps"]


@dataclass(slots=True)
class ProcessReading:
    pid: int
    kind: ProcessKind  # which NVML list reported it: compute or MPS clients
    name: str | None
    name_error: str | None  # NVML error class name when the name could not be read
    used_bytes: int | None  # None: NVML reported NVML_VALUE_NOT_AVAILABLE
    gpu_instance_id: int | None  # None outside MIG
    compute_instance_id: int | None
    mig_device_uuid: str | None  # the MIG device the (GI, CI) pair belongs to


@dataclass(slots=True)
class MigDeviceReading:
    index: int
    uuid: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    profile: str | None  # e.g. "3g.71gb" or "1c.3g.71gb", parsed from the NVML device name
    # The GPU instance's memory slices: where they start (None: NVML told only a privileged
    # caller, the console infers it) and how many.
    start_slot: int | None = None
    size_slots: int | None = None
    total_bytes: int | None = None
    reserved_bytes: int | None = None
    used_bytes: int | None = None
    free_bytes: int | None = None


@dataclass(slots=True)
class CardReading:
    index: int
    uuid: str | None
    name: str | None
    lost: bool = False  # the card answered GpuIsLost (Xid 79 and the like)
    total_bytes: int | None = None
    reserved_bytes: int | None = None
    used_bytes: int | None = None
    free_bytes: int | None = None
    util_gpu: int | None = None  # percent
    util_memory: int | None = None  # percent
    mig_current: int | None = None  # NVML_DEVICE_MIG_ENABLE / _DISABLE, None where MIG is absent
    mig_pending: int | None = None
    compute_mode: int | None = None  # NVML_COMPUTEMODE_*
    mig_devices: list[MigDeviceReading] = field(default_factory=list)
    processes: list[ProcessReading] = field(default_factory=list)
    unsupported: tuple[str, ...] = ()  # NVML calls this card answers NotSupported


@dataclass(slots=True)
class CollectorFault:
    card_index: int | None  # None for host-wide calls (init, device count, driver version)
    call: str  # the NVML function (or scrape target) that failed
    error: str  # exception class name, e.g. "NVMLError_GpuIsLost"
    message: str
    card_uuid: str | None = None
    ts: float = 0.0


EventKind = Literal[
    "xid",
    "gpu_lost",
    "oom",
    "mps_server_down",
    "process_restart",
    "process_exit",
    "engine_fault",
    "kv_pressure",
]


@dataclass(slots=True)
class TelemetryEvent:
    ts: float
    kind: EventKind
    card_index: int | None
    card_uuid: str | None
    detail: dict[str, Any] = field(default_factory=dict)  # JSON-serialisable


@dataclass(slots=True)
class PollResult:
    host: str
    ts: float
    duration_s: float
    driver_version: str | None
    cards: list[CardReading]
    faults: list[CollectorFault]
    events: list[TelemetryEvent] = field(default_factory=list)
