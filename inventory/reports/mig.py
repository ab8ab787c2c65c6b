"""A MIG card's instances as the hardware nests them: GPU instances, compute instances inside.

A GPU instance (GI) owns memory slices and the memory on them; the compute instances (CIs) in
it (``1c.3g.71gb`` and ``2c.3g.71gb`` in one ``3g.71gb``) split its SMs but share that memory,
so memory is counted per GI, once, and compute per CI (NVIDIA MIG user guide, "Concepts").
NVML lists one MIG device per CI, each reporting the GI's whole memory; the inventory keeps
one ``MigSlice`` per device.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.placement.mig import UnknownMigCardType, canonical_profile_name, mig_card_type
from inventory.models import Gpu, MigSlice


@dataclass(frozen=True)
class GpuInstance:
    profile: str  # the GI's profile, e.g. 3g.71gb
    start_slot: int
    size_slots: int
    memory_bytes: int  # the GI's memory, shared by its compute instances
    compute_instances: tuple[MigSlice, ...]

    @property
    def shared(self) -> bool:
        return len(self.compute_instances) > 1

    @property
    def start_inferred(self) -> bool:
        return any(piece.start_inferred for piece in self.compute_instances)


def gpu_instances(slices: list[MigSlice]) -> list[GpuInstance]:
    """Group a card's MIG devices by GPU instance: devices on the same slots are one GI
    (different GPU instances never overlap, ``MigSlice.clean``)."""
    groups: dict[tuple[int, int], list[MigSlice]] = {}
    for piece in sorted(slices, key=lambda s: (s.start_slot, s.compute_instance_id or 0)):
        groups.setdefault((piece.start_slot, piece.size_slots), []).append(piece)
    return [
        GpuInstance(
            canonical_profile_name(pieces[0].profile_name),
            start,
            size,
            max(piece.memory_bytes for piece in pieces),
            tuple(pieces),
        )
        for (start, size), pieces in groups.items()
    ]


def mig_catalogued(gpu: Gpu) -> bool:
    """Whether the card's type has a MIG profile catalogue entry (else NVML's slices stand)."""
    try:
        mig_card_type(gpu.product_name, gpu.memory_total_bytes // 1024**2)
    except UnknownMigCardType:
        return False
    return True
