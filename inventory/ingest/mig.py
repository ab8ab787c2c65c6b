"""A MIG card's layout as its batches report it, set against the one the inventory holds.

A batch says per card the MIG mode now and after the next reset, and per MIG device its GPU
and compute instance, profile and, where the agent may ask (a privileged caller), the GPU
instance's memory slices. What differs from the inventory's open slices becomes a new layout:
devices unchanged keep their rows (deployments and samples keep naming them), the others are
closed and new ones opened. A start the agent could not read is inferred: a valid placement
around the instances whose starts are known. Django-free; `do_rediscover_mig_layout` writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from console.placement.mig import (
    UnknownMigCardType,
    canonical_profile_name,
    inferred_starts,
    mig_card_type,
)

# NVML_DEVICE_MIG_DISABLE / _ENABLE as Gpu.MigMode spells them.
MODES = {0: "disabled", 1: "enabled"}
ENABLED = MODES[1]


@dataclass(frozen=True, slots=True)
class Device:
    """A MIG device a batch reports."""

    uuid: str
    gpu_instance_id: int | None
    compute_instance_id: int | None
    profile: str
    start_slot: int | None
    size_slots: int | None
    memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class Known:
    """An open MIG slice as the inventory holds it."""

    pk: int
    uuid: str
    gpu_instance_id: int | None
    compute_instance_id: int | None
    profile: str
    start_slot: int
    size_slots: int


@dataclass(frozen=True, slots=True)
class Reported:
    mode: str
    pending: str  # the mode after the next reset where it differs, else ""
    devices: tuple[Device, ...]


@dataclass(frozen=True, slots=True)
class NewSlice:
    device: Device
    start_slot: int
    size_slots: int
    start_inferred: bool


@dataclass(frozen=True, slots=True)
class Layout:
    mode: str
    pending: str
    keep: tuple[int, ...]  # open slices the batch reports unchanged
    named: tuple[tuple[int, str], ...]  # kept slices that learn their device's UUID
    close: tuple[int, ...]
    open: tuple[NewSlice, ...]


def reported(payload: dict, gpu_id_of: Callable[[dict], int | None]) -> dict[int, Reported]:
    """Per card id, the MIG mode and devices the batch reports; a card whose mode it could not
    read (or that has no MIG) is left out, so a failed read never changes a layout."""
    modes: dict[int, tuple[str, str]] = {}
    for card in payload.get("cards") or ():
        current = MODES.get(card.get("mig_current"))
        gpu_id = gpu_id_of(card)
        if current is None or gpu_id is None:
            continue
        pending = MODES.get(card.get("mig_pending"), current)
        modes[gpu_id] = (current, "" if pending == current else pending)
    devices: dict[int, list[Device]] = {gpu_id: [] for gpu_id in modes}
    for row in payload.get("mig_devices") or ():
        gpu_id = gpu_id_of(row)
        if gpu_id in devices and row.get("uuid") and row.get("profile"):
            devices[gpu_id].append(
                Device(
                    row["uuid"],
                    row.get("gpu_instance_id"),
                    row.get("compute_instance_id"),
                    row["profile"],
                    row.get("start_slot"),
                    row.get("size_slots"),
                    row.get("total_bytes"),
                )
            )
    return {
        gpu_id: Reported(mode, pending, tuple(devices[gpu_id]) if mode == ENABLED else ())
        for gpu_id, (mode, pending) in modes.items()
    }


def _unchanged(device: Device, known: Known) -> bool:
    # A start the agent could not read agrees with any start the inventory holds; a slice
    # entered by hand without its UUID is the device on its instances.
    return (
        known.uuid in ("", device.uuid)
        and (device.gpu_instance_id, device.compute_instance_id)
        == (known.gpu_instance_id, known.compute_instance_id)
        and canonical_profile_name(device.profile) == canonical_profile_name(known.profile)
        and device.start_slot in (None, known.start_slot)
    )


def relayout(
    report: Reported,
    mode: str,
    pending: str,
    known: list[Known],
    product_name: str,
    memory_total_bytes: int,
) -> Layout | None:
    """The layout to write, or None when the batch reports what the inventory holds, or
    devices that cannot share one card (a batch caught in the middle of a repartition: the
    next one tells the new layout whole)."""
    keep, named, opened = [], [], []
    for device in report.devices:
        match = next((k for k in known if k not in keep and _unchanged(device, k)), None)
        if match is None:
            opened.append(device)
            continue
        keep.append(match)
        if match.uuid != device.uuid:
            named.append((match.pk, device.uuid))
    close = [k.pk for k in known if k not in keep]
    unchanged = (report.mode, report.pending) == (mode, pending)
    if unchanged and not (opened or close or named):
        return None
    slices = _placed(opened, keep, product_name, memory_total_bytes)
    if slices is None:
        return None
    return Layout(
        report.mode,
        report.pending,
        tuple(k.pk for k in keep),
        tuple(named),
        tuple(close),
        tuple(slices),
    )


def _placed(
    devices: list[Device], kept: list[Known], product_name: str, memory_total_bytes: int
) -> list[NewSlice] | None:
    try:
        card_type = mig_card_type(product_name, memory_total_bytes // 1024**2)
    except UnknownMigCardType:
        card_type = None
    # A GPU instance's start: told by the agent, or that of a kept device of the same GPU
    # instance (its compute instances share it), or inferred around both.
    starts: dict[int | None, tuple[int, int]] = {
        k.gpu_instance_id: (k.start_slot, k.size_slots) for k in kept
    }
    for device in devices:
        if device.start_slot is not None and device.size_slots is not None:
            starts.setdefault(device.gpu_instance_id, (device.start_slot, device.size_slots))
    taken = 0
    for start, size in starts.values():
        mask = ((1 << size) - 1) << start
        if taken & mask:
            return None  # two GPU instances on one slice: old and new layout in one batch
        taken |= mask
    unplaced = {
        d.gpu_instance_id: d.profile
        for d in devices
        if d.gpu_instance_id not in starts and d.gpu_instance_id is not None
    }
    inferred: dict[int, int] = {}
    if unplaced:
        if card_type is None:
            return None  # no catalogue to place the instances by
        inferred = inferred_starts(card_type, unplaced, taken) or {}
        if len(inferred) < len(unplaced):
            return None
    slices = []
    for device in devices:
        gi = device.gpu_instance_id
        if gi in inferred:
            profile = card_type.profile(canonical_profile_name(device.profile))
            slices.append(NewSlice(device, inferred[gi], profile.memory_slices, True))
        elif gi in starts:
            start, size = starts[gi]
            slices.append(NewSlice(device, start, size, device.start_slot is None))
        else:
            return None  # a device outside any GPU instance: not a MIG device NVML lists
    return slices
