from __future__ import annotations

import re
from pathlib import Path

import pytest

from inventory.telemetry.fake_nvml import FakeCard, FakeHostState, FakeNvml, FakeProcess
from inventory.telemetry.simulator.catalogue import (
    H200_CAPTURED_LAYOUT,
    MIB,
    build_card,
    gpu_type,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NVIDIA_SMI = FIXTURES / "nvidia-smi"
ENGINES = FIXTURES / "engines"


def capture(name: str) -> str:
    return (NVIDIA_SMI / name).read_text()


def query_sections(text: str) -> list[str]:
    """The `nvidia-smi -q` sections (idle, then under load) of a capture."""
    parts = re.split(r"^# (?:idle|load) :: query \(-q\)$", text, flags=re.M)
    return [p.split("#" * 80 + "\n#", 1)[0] for p in parts[1:]]


def mib_field(block: str, heading: str, field_name: str) -> list[int]:
    """Every `field` value (MiB) under each `heading` block of a -q section."""
    values = []
    for match in re.finditer(rf"^(\s*){re.escape(heading)}\n((?:\1\s+.*\n)+)", block, re.M):
        found = re.search(rf"{field_name}\s*:\s*(\d+) MiB", match.group(2))
        if found:
            values.append(int(found.group(1)))
    return values


def h100_card(host: str, index: int, processes: list[FakeProcess] | None = None) -> FakeCard:
    card = build_card(gpu_type("H100-SXM5-80GB"), host, index)
    card.processes = processes or []
    return card


def h200_mig_card(host: str, index: int) -> FakeCard:
    """The H200 MIG capture's layout and its three processes, under load."""
    card = build_card(gpu_type("H200"), host, index, H200_CAPTURED_LAYOUT)
    in_gi2_ci1 = {"gpu_instance_id": 2, "compute_instance_id": 1}
    card.processes = [
        FakeProcess(12249, "/root/tools/memhog", 2194 * MIB, **in_gi2_ci1),
        FakeProcess(12250, "/root/tools/memhog", 1170 * MIB, **in_gi2_ci1),
        FakeProcess(12267, "./gpu_burn", 13526 * MIB, **in_gi2_ci1),
    ]
    return card


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


def nvml_for(*cards: FakeCard) -> FakeNvml:
    return FakeNvml(FakeHostState(list(cards)))
