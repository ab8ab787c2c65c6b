"""Placement diagrams: blocks to scale, stranded memory named, MIG slices on their slots."""

import json

import pytest

from console.placement import solve
from console.placement.diagram import build, to_drawing
from inventory.models import Deployment, Gpu
from inventory.placement_state import current_placement
from tests.console.placement.support import SCENARIOS
from tests.factories import DeploymentFactory, GpuFactory, MigSliceFactory


def test_blocks_are_to_scale_and_fill_the_card():
    request = json.loads((SCENARIOS / "seed-3xa100-5models.json").read_text())
    columns = build(request, solve(request))
    first = columns[0]
    assert sum(block.height for block in first.blocks) == pytest.approx(first.scale)
    sizes = {block.label: block.height for block in first.blocks}
    # 45 GiB and 30 GiB models on an 80 GiB card: heights in the same ratio as their sizes.
    assert sizes["llama3-70b-q4"] / sizes["mistral-7b-q8"] == pytest.approx(45 / 30)
    empty = [column for column in columns if all(b.kind == "free" for b in column.blocks)]
    assert len(empty) == 1  # the card the packing keeps free


def test_free_memory_beside_a_model_that_shares_with_no_one_is_stranded():
    request = json.loads((SCENARIOS / "seed-8card-3models.json").read_text())
    columns = build(request, solve(request))
    kinds = {block.kind for column in columns for block in column.blocks}
    assert "stranded" in kinds
    assert "headroom" in kinds  # the scenario keeps 4 GiB free on every card


def test_draw_places_columns_side_by_side():
    request = json.loads((SCENARIOS / "seed-3xa100-5models.json").read_text())
    drawing = to_drawing(build(request, solve(request)))
    assert [column.x for column in drawing.columns] == [0, 100, 200]
    assert drawing.width == 300
    assert [label for label, _ in drawing.models] == sorted(m["name"] for m in request["models"])


@pytest.mark.django_db
def test_the_inventory_draws_mig_slices_on_their_start_slots():
    mig = MigSliceFactory(start_slot=4, size_slots=4, profile_name="3g.71gb")
    DeploymentFactory(
        host=mig.gpu.host,
        isolation_mode=Deployment.Isolation.MIG,
        mig_slice=mig,
        served_model__name="qwen-32b",
    )
    columns = build(*current_placement(mig.gpu.host))
    (column,) = columns
    assert column.mig_slots == 8
    slice_block = next(block for block in column.blocks if "qwen-32b" in block.label)
    assert slice_block.top == pytest.approx(column.scale * 4 / 8)
    assert slice_block.height == pytest.approx(column.scale * 4 / 8)
    assert sum(1 for block in column.blocks if block.kind == "free") == 4


@pytest.mark.django_db
def test_the_inventory_uses_estimates_until_the_collector_has_measured():
    gpu = GpuFactory(mig_mode=Gpu.MigMode.DISABLED)
    DeploymentFactory(host=gpu.host, gpus=[gpu], kv_reservation_bytes=8 * 1024**3,
                      served_model__weights_bytes=16 * 1024**3)  # fmt: skip
    request, answer = current_placement(gpu.host)
    (model,) = request["models"]
    # weights + KV + the CUDA context (518 MiB, the H200's measurement as an estimate) +
    # workspace allowance
    assert model["memory_mib"] == (16 + 8 + 2) * 1024 + 518
    assert answer["cards"][0]["used_mib"] == model["memory_mib"]


def _mig_card(product_name: str, total_mib: int, slices: list[tuple[str, int, int, int]]):
    """A MIG card and its instances: (profile, start slot, slots, memory MiB)."""
    gpu = GpuFactory(
        product_name=product_name,
        memory_total_bytes=total_mib * 1024**2,
        mig_mode=Gpu.MigMode.ENABLED,
    )
    for profile, start, size, mib in slices:
        MigSliceFactory(gpu=gpu, profile_name=profile, start_slot=start, size_slots=size,
                        memory_bytes=mib * 1024**2)  # fmt: skip
    return gpu


@pytest.mark.django_db
def test_a_b200_mig_card_renders_on_the_host_page(client_as):
    # MIG user guide: B200 profiles 1g.23gb ... 7g.180gb on the 8-slot geometry of H100/H200.
    gpu = _mig_card("NVIDIA B200", 183359, [("3g.90gb", 0, 4, 89600), ("2g.45gb", 4, 2, 44800)])
    DeploymentFactory(
        host=gpu.host,
        isolation_mode=Deployment.Isolation.MIG,
        mig_slice=gpu.mig_slices.get(start_slot=0),
        served_model__name="llama",
    )
    page = client_as("oncall").get(f"/hosts/{gpu.host.name}/")
    assert page.status_code == 200
    (column,) = page.context["placement"].columns
    assert column.note == ""  # catalogued
    assert len(column.slot_lines) == 7  # eight memory slots
    assert "llama (3g.90gb)" in page.content.decode()


@pytest.mark.django_db
def test_an_uncatalogued_mig_card_shows_nvmls_own_slices_instead_of_failing(client_as):
    # The 144 GB GH200 is not in the guide's tables the catalogue was built from.
    gpu = _mig_card("NVIDIA GH200 144G HBM3e", 146432, [("1g.18gb", 0, 1, 16896),
                                                       ("3g.72gb", 4, 4, 72192)])  # fmt: skip
    page = client_as("oncall").get(f"/hosts/{gpu.host.name}/")
    assert page.status_code == 200
    (column,) = page.context["placement"].columns
    assert column.note == "mig_not_catalogued"
    blocks = {block.label: block for block in column.blocks}
    assert blocks["unused (3g.72gb)"].mib == 72192
    assert "MIG card type not catalogued" in page.content.decode()


@pytest.mark.django_db
def test_the_host_page_shows_sibling_compute_instances_as_one_gpu_instance(client_as):
    # 1c.3g.71gb + 2c.3g.71gb: two NVML devices, one 69.75 GiB GPU instance (not two).
    gpu = _mig_card("NVIDIA H200", 143771, [])
    for ci, name in enumerate(("1c.3g.71gb", "2c.3g.71gb")):
        MigSliceFactory(gpu=gpu, profile_name=name, start_slot=0, size_slots=4,
                        memory_bytes=71424 * 1024**2, gpu_instance_id=1,
                        compute_instance_id=ci)  # fmt: skip
    page = client_as("oncall").get(f"/hosts/{gpu.host.name}/")
    (instance,) = page.context["gpu_instances"][gpu.pk]
    assert (instance.profile, instance.memory_bytes) == ("3g.71gb", 71424 * 1024**2)
    assert [ci.profile_name for ci in instance.compute_instances] == ["1c.3g.71gb", "2c.3g.71gb"]
    assert "shared by 1c.3g.71gb + 2c.3g.71gb" in page.content.decode()
