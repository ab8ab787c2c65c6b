"""MIG catalogue, card-type normaliser and slice placement."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.placement import solve
from console.placement.mig import (
    UnknownMigCardType,
    canonical_profile_name,
    choose_slice,
    creatable_profiles,
    free_starts,
    layout_errors,
    mig_card_type,
)
from console.placement.mig_profiles import CATALOGUE, MigCardType, estimated_instance_mib
from console.placement.problem import MigSlice
from tests.examples import examples

from .support import FIXTURES, check_answer

# NVIDIA MIG user guide, "Supported MIG Profiles": instances of one profile a card can hold.
DOCUMENTED_MAX_INSTANCES = {
    "A100-40GB": {
        "1g.5gb": 7,
        "1g.10gb": 4,
        "2g.10gb": 3,
        "3g.20gb": 2,
        "4g.20gb": 1,
        "7g.40gb": 1,
    },
    "A100-80GB": {
        "1g.10gb": 7,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    },
    "H100-80GB": {
        "1g.10gb": 7,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    },
    "H200-141GB": {
        "1g.18gb": 7,
        "1g.35gb": 4,
        "2g.35gb": 3,
        "3g.71gb": 2,
        "4g.71gb": 1,
        "7g.141gb": 1,
    },
    "A30-24GB": {"1g.6gb": 4, "2g.12gb": 2, "4g.24gb": 1},
    # Cards whose geometry comes from the guide alone (sizes estimated from the names).
    "H100-94GB": {"1g.12gb": 7, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "7g.94gb": 1},
    "H100-96GB": {"1g.12gb": 7, "1g.24gb": 4, "2g.24gb": 3, "3g.48gb": 2, "7g.96gb": 1},
    "B200-180GB": {"1g.23gb": 7, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "7g.180gb": 1},
    "GB200-186GB": {"1g.23gb": 7, "1g.47gb": 4, "2g.47gb": 3, "3g.93gb": 2, "7g.186gb": 1},
    "RTX-PRO-6000-Blackwell-96GB": {"1g.24gb": 4, "2g.48gb": 2, "4g.96gb": 1},
    "RTX-PRO-5000-Blackwell-48GB": {"1g.24gb": 2, "2g.48gb": 1},
}


def most_instances(card_type: MigCardType, profile_name: str) -> int:
    profile = card_type.profile(profile_name)
    assert profile is not None
    occupied, count = 0, 0
    while starts := free_starts(profile, occupied):
        occupied |= profile.slot_mask(starts[0])
        count += 1
    return count


@pytest.mark.parametrize("card_name", sorted(DOCUMENTED_MAX_INSTANCES))
def test_start_slots_allow_exactly_the_documented_instance_counts(card_name):
    card_type = CATALOGUE[card_name]
    for profile_name, expected in DOCUMENTED_MAX_INSTANCES[card_name].items():
        assert most_instances(card_type, profile_name) == expected, profile_name
    for profile in card_type.profiles:
        assert all(s + profile.memory_slices <= card_type.memory_slices for s in profile.starts)
        # The name says how many compute slices the instance has.
        assert profile.name.startswith(f"{profile.compute_slices}g.")


@pytest.mark.parametrize("card_type", list(CATALOGUE.values()), ids=list(CATALOGUE))
def test_bigger_instances_have_at_least_the_memory_of_smaller_ones(card_type):
    by_slices = sorted(creatable_profiles(card_type), key=lambda p: p.memory_slices)
    memories = [p.memory_mib for p in by_slices]
    assert memories == sorted(memories)
    whole = max(by_slices, key=lambda p: p.memory_slices)
    assert whole.memory_slices == card_type.memory_slices and whole.starts == (0,)


def captured_instances(capture: str) -> dict[str, int]:
    """Profile name -> instance memory, from `nvidia-smi -L` and the MIG devices table."""
    text = (FIXTURES / "nvidia-smi" / capture).read_text()
    names = re.findall(r"^\s+MIG (\S+)\s+Device\s+(\d+):", text, re.MULTILINE)
    table = re.findall(
        r"^\|\s+\d+\s+\d+\s+\d+\s+(\d+)\s+\|\s+\d+MiB /\s*(\d+)MiB", text, re.MULTILINE
    )
    memory_of_device = {int(device): int(total) for device, total in table}
    assert names and memory_of_device
    return {canonical_profile_name(name): memory_of_device[int(dev)] for name, dev in names}


@pytest.mark.parametrize(
    ("capture", "card_type_name"),
    [
        ("linux-x86_64__nvidia-h100-mig__590.48.01.txt", "NVIDIA H100 80GB HBM3"),
        ("linux-x86_64__nvidia-h200-mig__590.48.01.txt", "NVIDIA H200"),
    ],
)
def test_catalogue_matches_the_real_captures(capture, card_type_name):
    card_type = mig_card_type(card_type_name)
    for name, memory in captured_instances(capture).items():
        profile = card_type.profile(name)
        assert profile is not None, name
        assert profile.memory_mib == memory, name


@pytest.mark.parametrize(
    ("name", "memory", "expected"),
    [
        ("A100-SXM4-80GB", None, "A100-80GB"),
        ("NVIDIA A100-PCIE-40GB", None, "A100-40GB"),
        ("NVIDIA A100-PCIE", 40960, "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", None, "A100-80GB"),
        ("H100-SXM5-80GB", None, "H100-80GB"),
        ("NVIDIA H100 80GB HBM3", 81559, "H100-80GB"),
        ("NVIDIA H100 PCIe", 81559, "H100-80GB"),
        ("NVIDIA H200", 143771, "H200-141GB"),
        ("H200-SXM-141GB", None, "H200-141GB"),
        ("NVIDIA A30", 24258, "A30-24GB"),
        ("NVIDIA H100 NVL", 95830, "H100-94GB"),
        ("NVIDIA H100 94GB", None, "H100-94GB"),
        ("NVIDIA GH200 480GB", 97280, "H100-96GB"),
        ("NVIDIA H20", None, "H100-96GB"),
        ("NVIDIA H20", 97871, "H100-96GB"),
        ("NVIDIA H800", 81559, "H100-80GB"),
        ("NVIDIA A800-SXM4-80GB", None, "A100-80GB"),
        ("NVIDIA A800 40GB Active", None, "A100-40GB"),
        ("NVIDIA B200", None, "B200-180GB"),
        ("NVIDIA GB200", None, "GB200-186GB"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", None, "RTX-PRO-6000-Blackwell-96GB"),
        ("NVIDIA RTX PRO 5000 Blackwell", None, "RTX-PRO-5000-Blackwell-48GB"),
    ],
)
def test_card_type_names_map_to_catalogue_entries(name, memory, expected):
    assert mig_card_type(name, memory).name == expected


def test_uncaptured_cards_say_their_sizes_are_estimates_below_the_nominal():
    b200 = mig_card_type("NVIDIA B200")
    assert b200.memory_estimated and not mig_card_type("NVIDIA H200").memory_estimated
    # 90 GB nominal: 83,819 MiB; the estimate keeps 7% below it.
    assert b200.profile("3g.90gb").memory_mib == 90 * 1000**3 * 93 // 100 // 1024**2
    # The rule stays under every captured instance (H200 1g.18gb is the tightest: 16,384 MiB).
    for captured in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        for profile in mig_card_type(captured).profiles:
            assert estimated_instance_mib(profile.name.removesuffix("+me")) < profile.memory_mib


@pytest.mark.parametrize(
    ("name", "memory"),
    [
        ("Tesla T4", 15360),
        ("NVIDIA H20", 143771),  # the 141 GB H20: not the 96 GB card's profiles
        ("NVIDIA H20-3e", None),  # NVML's name for the 141 GB H20, without its total
        ("NVIDIA H20-3e", 143771),
        ("NVIDIA H20 141GB", None),
        ("", None),
        ("NVIDIA L40S", 46068),
        ("NVIDIA GH200 144G HBM3e", 146000),  # other instance sizes, not in the guide's tables
    ],
)
def test_unknown_card_types_are_refused_clearly(name, memory):
    with pytest.raises(UnknownMigCardType, match="no MIG profile catalogue"):
        mig_card_type(name, memory)


def test_layout_errors_catch_overlaps_and_bad_starts():
    h100 = CATALOGUE["H100-80GB"]
    three_g = h100.profile("3g.40gb")
    two_g = h100.profile("2g.20gb")
    assert three_g and two_g
    assert layout_errors(h100, [MigSlice(three_g, 0, None), MigSlice(three_g, 4, None)]) == []
    assert layout_errors(h100, [MigSlice(three_g, 4, None), MigSlice(two_g, 6, None)])
    assert layout_errors(h100, [MigSlice(two_g, 1, None)])


@given(
    card_name=st.sampled_from(sorted(CATALOGUE)),
    needs=st.lists(st.integers(min_value=0, max_value=150_000), max_size=12),
)
@settings(max_examples=examples(150), deadline=None)
def test_chosen_slices_never_overlap_and_are_the_smallest_that_fit(card_name, needs):
    card_type = CATALOGUE[card_name]
    occupied = 0
    compute_used = 0
    for need in needs:
        choice = choose_slice(card_type, occupied, need)
        fitting = [p for p in creatable_profiles(card_type) if p.memory_mib >= need]
        placeable = [p for p in fitting if free_starts(p, occupied)]
        if choice is None:
            assert not placeable
            continue
        profile, start = choice
        assert start in profile.starts
        assert not profile.slot_mask(start) & occupied
        assert profile.memory_mib >= need and not profile.media_extensions
        assert profile.memory_mib == min(p.memory_mib for p in placeable)
        occupied |= profile.slot_mask(start)
        compute_used += profile.compute_slices
    assert occupied < 1 << card_type.memory_slices
    # Valid starts alone keep the instances within the card's compute slices.
    assert compute_used <= card_type.compute_slices


def test_small_slices_keep_the_start_the_big_profiles_need():
    h100 = CATALOGUE["H100-80GB"]
    occupied = 0
    for _ in range(3):
        profile, start = choose_slice(h100, occupied, 9000)
        occupied |= profile.slot_mask(start)
    # After three 1g slices a 4g.40gb (start 0 only) still fits.
    four_g = h100.profile("4g.40gb")
    assert four_g and free_starts(four_g, occupied) == (0,)


def mig_request(models: list[dict], slices: list[dict] | None = None) -> dict:
    card = {
        "id": "m:0",
        "host": "m",
        "type": "NVIDIA H100 80GB HBM3",
        "memory_mib": 81559,
        "mig": True,
    }
    if slices:
        card["mig_slices"] = slices
        card["models"] = [s["model"] for s in slices]
    plain = {"id": "m:1", "host": "m", "type": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}
    return {
        "gpus": [card, plain],
        "models": models,
        "policy": {"method": "auto", "time_limit_s": 2},
    }


def test_mig_models_go_beside_existing_slices_in_the_smallest_profile():
    request = mig_request(
        [
            {"name": "small", "memory_mib": 9000, "isolation": "mig"},
            {"name": "mid", "memory_mib": 19000, "isolation": "mig"},
        ],
        slices=[{"profile": "3g.40gb", "start": 0, "model": "old"}],
    )
    answer = solve(request)
    check_answer(request, answer)
    profiles = {a["model"]: a["mig_profile"] for a in answer["assignments"]}
    assert profiles == {"small": "1g.10gb", "mid": "1g.20gb"}
    assert all(a["gpus"] == ["m:0"] for a in answer["assignments"])


def test_a_mig_model_that_no_slice_can_hold_is_explained():
    request = mig_request(
        [{"name": "big", "memory_mib": 40000, "isolation": "mig"}],
        slices=[
            {"profile": "3g.40gb", "start": 0, "model": "a"},
            {"profile": "1g.10gb", "start": 4, "model": "b"},
        ],
    )
    answer = solve(request)
    check_answer(request, answer)
    (entry,) = answer["unplaced"]
    assert "40000" in entry["reason"] and "3g.40gb" in entry["reason"]
    assert "free slots [5, 6, 7]" in entry["reason"]


def test_mig_models_never_land_on_plain_cards_and_vice_versa():
    request = mig_request(
        [
            {"name": "sliced", "memory_mib": 5000, "isolation": "mig"},
            {"name": "plain", "memory_mib": 5000},
        ],
    )
    answer = solve(request)
    check_answer(request, answer)
    where = {a["model"]: a["gpus"] for a in answer["assignments"]}
    assert where == {"sliced": ["m:0"], "plain": ["m:1"]}
