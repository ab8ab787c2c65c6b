"""GPU models as NVML reports them, calibrated on real nvidia-smi captures.

Figures come from tests/fixtures/nvidia-smi/ (`-q` "FB Memory Usage" and "MIG Device" sections,
`-L` for MIG profile names). Where a figure was not captured the entry says so in `source`.
All memory here is MiB, as nvidia-smi prints it; the fake converts to bytes.
"""

from __future__ import annotations

import uuid as uuid_lib
from dataclasses import dataclass, field

from inventory.telemetry.fake_nvml import (
    NVML_COMPUTEMODE_DEFAULT,
    NVML_DEVICE_MIG_DISABLE,
    NVML_DEVICE_MIG_ENABLE,
    FakeCard,
    FakeMigDevice,
)

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str  # GPU instance profile, e.g. "3g.71gb"
    memory_mib: int  # "Shared FB Memory Usage / Total" of an instance of this profile
    slices: int
    sm_count: int
    idle_used_mib: int  # "Used" of an idle instance


@dataclass(frozen=True, slots=True)
class GpuType:
    key: str
    product_name: str  # nvmlDeviceGetName
    total_mib: int
    reserved_mib: int
    driver_version: str
    sm_count: int
    context_overhead_mib: int  # card "used" minus the processes' sum under load
    mig_profiles: dict[str, MigProfile] = field(default_factory=dict)
    max_mig_devices: int = 0
    source: str = ""

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    @property
    def usable_bytes(self) -> int:
        """What processes can have: total minus driver-reserved minus the context overhead."""
        return (self.total_mib - self.reserved_mib - self.context_overhead_mib) * MIB


_H100_MIG = {
    "1g.10gb": MigProfile("1g.10gb", 9984, 1, 16, 9),
    "2g.20gb": MigProfile("2g.20gb", 20096, 2, 32, 17),
    "3g.40gb": MigProfile("3g.40gb", 40448, 3, 60, 26),
}
_H200_MIG = {
    "1g.18gb": MigProfile("1g.18gb", 16384, 1, 16, 9),
    "2g.35gb": MigProfile("2g.35gb", 33280, 2, 32, 17),
    "3g.71gb": MigProfile("3g.71gb", 71424, 3, 60, 22),
}
# A100-80GB: instance memory as console.placement.mig_profiles has it (`nvidia-smi mig -lgip`
# listings, no capture here); SMs per instance from the MIG user guide's A100 table (98 of 108
# SMs under MIG: 14 a compute slice); idle "used" not captured, taken from the H100.
_A100_80GB_MIG = {
    "1g.10gb": MigProfile("1g.10gb", 9728, 1, 14, 9),
    "2g.20gb": MigProfile("2g.20gb", 19968, 2, 28, 17),
    "3g.40gb": MigProfile("3g.40gb", 40192, 3, 42, 26),
}

CATALOGUE: dict[str, GpuType] = {
    gpu.key: gpu
    for gpu in (
        GpuType(
            "H100-SXM5-80GB",
            "NVIDIA H100 80GB HBM3",
            81559,
            479,
            "590.48.01",
            132,
            20,
            _H100_MIG,
            7,
            "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt, ...h100-mig...",
        ),
        GpuType(
            "H200",
            "NVIDIA H200",
            143771,
            614,
            "590.48.01",
            132,
            20,
            _H200_MIG,
            7,
            "linux-x86_64__nvidia-h200__590.48.01.txt, ...h200-mig...",
        ),
        GpuType(
            "L40S",
            "NVIDIA L40S",
            46068,
            609,
            "595.80",
            142,
            16,
            source="linux-x86_64__nvidia-l40s__595.80.txt",
        ),
        GpuType(
            "RTX-4080-SUPER",
            "NVIDIA GeForce RTX 4080 SUPER",
            16376,
            434,
            "595.71.05",
            80,
            16,
            source="linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt",
        ),
        GpuType(
            "RTX-2080-SUPER",
            "NVIDIA GeForce RTX 2080 SUPER",
            8192,
            408,
            "595.71.05",
            48,
            16,
            source="linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt",
        ),
        GpuType(
            "A100-SXM4-80GB",
            "NVIDIA A100-SXM4-80GB",
            81920,
            479,
            "590.48.01",
            108,
            20,
            _A100_80GB_MIG,
            7,
            source="not captured: total from seed-3xa100-5models.json, reserved taken from H100;"
            " MIG sizes from mig -lgip listings",
        ),
    )
}

_ALIASES = {
    "H100": "H100-SXM5-80GB",
    "H100-80GB": "H100-SXM5-80GB",
    "NVIDIA H100 80GB HBM3": "H100-SXM5-80GB",
    "H200-141GB": "H200",
    "NVIDIA H200": "H200",
    "A100-80GB": "A100-SXM4-80GB",
    "NVIDIA L40S": "L40S",
}


def gpu_type(name: str) -> GpuType:
    """Resolve a placement file's `type` (or an NVML product name) to a catalogue entry."""
    key = _ALIASES.get(name, name)
    try:
        return CATALOGUE[key]
    except KeyError:
        raise KeyError(f"unknown GPU type {name!r}; known: {sorted(CATALOGUE)}") from None


@dataclass(frozen=True, slots=True)
class MigSlice:
    """One MIG device as `nvidia-smi -L` lists it: profile, GPU instance, compute instance."""

    profile: str  # "3g.71gb", or "1c.3g.71gb" for a compute instance smaller than its GI
    gpu_instance_id: int
    compute_instance_id: int = 0
    start_slot: int = 0  # the GPU instance's first memory slice

    @property
    def gpu_instance_profile(self) -> str:
        parts = self.profile.split(".")
        return ".".join(parts[1:]) if parts[0].endswith("c") else self.profile


# The H200 MIG capture, exactly: one 3g GI split in two compute instances, a 2g, two 1g
# (the capture lists no placements: these are valid ones for its instances).
H200_CAPTURED_LAYOUT = (
    MigSlice("1c.3g.71gb", 2, 0, start_slot=4),
    MigSlice("2c.3g.71gb", 2, 1, start_slot=4),
    MigSlice("2g.35gb", 3, 0, start_slot=0),
    MigSlice("1g.18gb", 9, 0, start_slot=2),
    MigSlice("1g.18gb", 10, 0, start_slot=3),
)
# Memory slices of a GPU instance of an eight-slice card, by its compute slices ("3g": 3):
# the 3g profile takes half the card's memory (NVIDIA MIG user guide, supported profiles).
MEMORY_SLICES = {1: 1, 2: 2, 3: 4, 4: 4, 7: 8}


def device_uuid(host: str, index: int) -> str:
    return "GPU-" + str(uuid_lib.uuid5(uuid_lib.NAMESPACE_DNS, f"{host}/gpu/{index}"))


def mig_uuid(host: str, index: int, mig_slice: MigSlice) -> str:
    key = f"{host}/gpu/{index}/gi/{mig_slice.gpu_instance_id}/ci/{mig_slice.compute_instance_id}"
    return "MIG-" + str(uuid_lib.uuid5(uuid_lib.NAMESPACE_DNS, key))


def build_card(
    gpu: GpuType,
    host: str,
    index: int,
    mig_layout: tuple[MigSlice, ...] | None = None,
    compute_mode: int = NVML_COMPUTEMODE_DEFAULT,
) -> FakeCard:
    """A fake card of this type; with `mig_layout`, MIG enabled and partitioned so."""
    mig_devices = []
    for mig_slice in mig_layout or ():
        profile = gpu.mig_profiles[mig_slice.gpu_instance_profile]
        mig_devices.append(
            FakeMigDevice(
                uuid=mig_uuid(host, index, mig_slice),
                gpu_instance_id=mig_slice.gpu_instance_id,
                compute_instance_id=mig_slice.compute_instance_id,
                profile=mig_slice.profile,
                total_bytes=profile.memory_mib * MIB,
                base_used_bytes=profile.idle_used_mib * MIB,
                start_slot=mig_slice.start_slot,
                size_slots=MEMORY_SLICES[profile.slices],
            )
        )
    if gpu.mig_capable:
        mig_mode = NVML_DEVICE_MIG_ENABLE if mig_layout else NVML_DEVICE_MIG_DISABLE
    else:
        mig_mode = None
    return FakeCard(
        uuid=device_uuid(host, index),
        name=gpu.product_name,
        total_bytes=gpu.total_mib * MIB,
        reserved_bytes=gpu.reserved_mib * MIB,
        base_used_bytes=gpu.context_overhead_mib * MIB,
        mig_current=mig_mode,
        mig_pending=mig_mode,
        max_mig_devices=gpu.max_mig_devices,
        mig_devices=mig_devices,
        compute_mode=compute_mode,
    )
