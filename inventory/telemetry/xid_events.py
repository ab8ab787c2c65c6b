"""Xid critical errors through NVML's event API, drained without blocking once per poll."""

from __future__ import annotations

import contextlib
import ctypes
from dataclasses import dataclass
from typing import Any

from inventory.telemetry.readings import CollectorFault, TelemetryEvent

_NOT_AVAILABLE_UINT = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class XidInfo:
    meaning: str
    action: str  # what to do first: one of ACTIONS
    scope: str  # "application": the process that hit it; "gpu": every process on the card


# What on-call does first, mildest first.
ACTIONS = {
    "none": "informational; no action unless it repeats",
    "restart_app": "restart the application; if it repeats on one card, test the card",
    "check_row_remapping": "check row remapping (nvidia-smi -q -d ROW_REMAPPER); reset the "
    "GPU at the next drain to apply pending remaps",
    "drain": "drain the card's workloads, then reset the GPU",
    "reset_gpu": "reset the GPU (nvidia-smi -r) once its processes are stopped",
    "reboot_node": "drain the node and reboot it; check power, PCIe and thermals",
}

# After NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors, "Analyzing Xid Errors with
# the Xid Catalog"): the codes a co-located inference host meets, each with the catalogue's
# immediate action (RESET_GPU: reset_gpu, or drain where every process on the card is lost;
# RESTART_BM: reboot_node; RESTART_APP: restart_app; IGNORE: none). Alerts (xid_class) and the
# Xid triage runbook's table follow this table; a test holds the runbook to it.
XID_CATALOGUE = {
    8: XidInfo("GPU stopped processing (timeout)", "restart_app", "application"),
    13: XidInfo("graphics engine exception (application fault)", "restart_app", "application"),
    31: XidInfo("GPU memory page fault (application fault)", "restart_app", "application"),
    # NVIDIA: mostly PCIe link quality, not the application; restarting it is still the first
    # step, a repeat on one card means testing the card.
    32: XidInfo("invalid or corrupted push buffer stream", "restart_app", "application"),
    38: XidInfo("driver firmware error", "none", "gpu"),
    43: XidInfo("GPU stopped processing (application fault)", "restart_app", "application"),
    45: XidInfo(
        "preemptive cleanup after an earlier error or a killed process", "none", "application"
    ),
    46: XidInfo("GPU stopped processing (GPU timeout)", "reset_gpu", "gpu"),
    48: XidInfo("double bit ECC error", "drain", "gpu"),
    61: XidInfo("internal micro-controller breakpoint or warning", "reset_gpu", "gpu"),
    62: XidInfo("internal micro-controller halt", "reset_gpu", "gpu"),
    63: XidInfo("ECC page retirement or row remapping recorded", "check_row_remapping", "gpu"),
    64: XidInfo("ECC page retirement or row remapping failure", "drain", "gpu"),
    68: XidInfo("video processor exception", "restart_app", "application"),
    69: XidInfo("graphics engine class error", "restart_app", "application"),
    74: XidInfo("NVLink error", "reset_gpu", "gpu"),
    79: XidInfo("GPU has fallen off the bus", "reboot_node", "gpu"),
    92: XidInfo("high single-bit ECC error rate", "check_row_remapping", "gpu"),
    94: XidInfo(
        "contained ECC error (only the process that hit it is affected)",
        "restart_app",
        "application",
    ),
    95: XidInfo("uncontained ECC error (every process on the card is affected)", "drain", "gpu"),
    109: XidInfo("context switch timeout", "reset_gpu", "gpu"),
    119: XidInfo("GSP RPC timeout", "reset_gpu", "gpu"),
    120: XidInfo("GSP error", "reset_gpu", "gpu"),
    # Corrected errors on the Grace C2C link: no impact now; a reset at a service window
    # retrains the link.
    121: XidInfo("C2C link error (corrected)", "none", "gpu"),
    140: XidInfo("unrecovered ECC error", "drain", "gpu"),
    154: XidInfo(
        "GPU recovery action changed (the driver asks for a reset or a reboot)", "drain", "gpu"
    ),
}
UNKNOWN_XID = XidInfo("see NVIDIA Xid catalogue", "none", "gpu")

# What an alert calls an Xid, by the catalogue's action: the card out of service (critical),
# the card to watch and reset at the next drain (warning), an application's own fault or
# information (info). Codes outside the catalogue are "other".
XID_CLASS_OF_ACTION = {
    "drain": "hardware",
    "reset_gpu": "hardware",
    "reboot_node": "hardware",
    "check_row_remapping": "memory",
    "restart_app": "application",
    "none": "application",
}


def xid_class(xid: int | None) -> str:
    info = XID_CATALOGUE.get(xid) if xid is not None else None
    return XID_CLASS_OF_ACTION[info.action] if info else "other"


def xid_detail(xid: int) -> dict[str, str]:
    """What an event's detail says about its Xid: meaning, action and who it hits."""
    info = XID_CATALOGUE.get(xid, UNKNOWN_XID)
    return {"meaning": info.meaning, "action": info.action, "scope": info.scope}


def _instance_id(value: Any) -> int | None:
    return None if value is None or value >= _NOT_AVAILABLE_UINT else int(value)


class XidDeduplicator:
    """One Xid, one event: NVML's event set and the kernel log both report each Xid.

    Keyed by card (UUID, else whatever identifies it: PCI bus id, index) and code. A report
    from one source that the other source already made within `window_s` is that same Xid and
    is dropped; repeats from one source (Xid 45 every few seconds) are each their own Xid.
    """

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._unmatched: dict[tuple[Any, int], list[tuple[str, float]]] = {}

    def admit(self, source: str, card: Any, xid: int, ts: float) -> bool:
        key = (card, int(xid))
        reports = [r for r in self._unmatched.get(key, ()) if ts - r[1] <= self.window_s]
        for position, (other, _) in enumerate(reports):
            if other != source:
                del reports[position]
                self._unmatched[key] = reports
                return False
        reports.append((source, ts))
        self._unmatched[key] = reports
        if len(self._unmatched) > 1024:
            self._unmatched = {k: v for k, v in self._unmatched.items() if v}
        return True


class XidEventReader:
    """Registers cards for Xid events and drains what the driver queued since the last poll."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._event_set: Any = None
        self._handles: dict[int, Any] = {}
        self._uuids: dict[int, str | None] = {}

    def register(
        self, index: int, handle: Any, uuid: str | None, ts: float
    ) -> CollectorFault | None:
        nvml = self._nvml
        try:
            if self._event_set is None:
                self._event_set = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(
                handle, nvml.nvmlEventTypeXidCriticalError, self._event_set
            )
        except nvml.NVMLError as exc:
            message = f"{exc}: no Xid events from NVML for this card; only the kernel log's arrive"
            return CollectorFault(
                index, "nvmlDeviceRegisterEvents", type(exc).__name__, message, uuid, ts
            )
        self._handles[index] = handle
        self._uuids[index] = uuid
        return None

    def drain(
        self, ts: float, max_events: int = 256
    ) -> tuple[list[TelemetryEvent], list[CollectorFault]]:
        if self._event_set is None:
            return [], []
        nvml = self._nvml
        events: list[TelemetryEvent] = []
        faults: list[CollectorFault] = []
        while len(events) < max_events:
            try:
                data = nvml.nvmlEventSetWait_v2(self._event_set, 0)
            except nvml.NVMLError_Timeout:
                break
            except nvml.NVMLError as exc:
                faults.append(
                    CollectorFault(None, "nvmlEventSetWait_v2", type(exc).__name__, str(exc), ts=ts)
                )
                break
            if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            index = self._index_of(data.device)
            xid = int(data.eventData)
            events.append(
                TelemetryEvent(
                    ts,
                    "xid",
                    index,
                    self._uuids.get(index) if index is not None else None,
                    {
                        "xid": xid,
                        **xid_detail(xid),
                        "source": "nvml",
                        "gpu_instance_id": _instance_id(data.gpuInstanceId),
                        "compute_instance_id": _instance_id(data.computeInstanceId),
                    },
                )
            )
        return events, faults

    def close(self) -> None:
        if self._event_set is not None:
            with contextlib.suppress(self._nvml.NVMLError):  # shutting down anyway
                self._nvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
            self._handles.clear()

    def _index_of(self, device: Any) -> int | None:
        # Handles of a lost card may not answer nvmlDeviceGetIndex; fall back on the handle we
        # registered (value equality for the fake, the address for ctypes pointers).
        try:
            return int(self._nvml.nvmlDeviceGetIndex(device))
        except (self._nvml.NVMLError, AttributeError):
            pass
        address = _address(device)
        for index, handle in self._handles.items():
            if handle is device or handle == device:
                return index
            if address is not None and _address(handle) == address:
                return index
        return None


def _address(handle: Any) -> int | None:
    """Where a ctypes pointer points: nvidia-ml-py hands a new pointer object for the same
    device in every event, equal to the registered one by address alone."""
    if not isinstance(handle, ctypes._Pointer):
        return None
    return ctypes.cast(handle, ctypes.c_void_p).value
