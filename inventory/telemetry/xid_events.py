"""Xid critical errors through NVML's event API, drained without blocking once per poll."""

from __future__ import annotations

import contextlib
from typing import Any

from inventory.telemetry.readings import CollectorFault, TelemetryEvent

_NOT_AVAILABLE_UINT = 0xFFFFFFFF

# What an operator should read into an Xid. Not exhaustive: the ones a co-located inference
# host sees, named after NVIDIA's Xid catalogue.
XID_MEANINGS = {
    13: "graphics engine exception (application fault)",
    31: "GPU memory page fault (application fault)",
    43: "GPU stopped processing (application fault)",
    48: "double bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    94: "contained ECC error",
    95: "uncontained ECC error",
}


def _instance_id(value: Any) -> int | None:
    return None if value is None or value >= _NOT_AVAILABLE_UINT else int(value)


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
            return CollectorFault(
                index, "nvmlDeviceRegisterEvents", type(exc).__name__, str(exc), uuid, ts
            )
        self._handles[index] = handle
        self._uuids[index] = uuid
        return None

    def forget(self, index: int) -> None:
        self._handles.pop(index, None)

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
                        "meaning": XID_MEANINGS.get(xid, "see NVIDIA Xid catalogue"),
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
        # registered (value equality for the fake, identity for ctypes pointers).
        try:
            return int(self._nvml.nvmlDeviceGetIndex(device))
        except (self._nvml.NVMLError, AttributeError):
            pass
        for index, handle in self._handles.items():
            if handle is device or handle == device:
                return index
        return None
