"""One-dimensional bin packing: OR-Library reader, lower bounds, arc-flow known answers."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.placement import solve
from console.placement.arcflow import Item, build_graph, solve_arc_flow
from console.placement.bounds import martello_toth_bound, volume_bound
from tests.console.placement.orlib import parse_orlib, read_orlib
from tests.examples import examples

from .support import FIXTURES

SETS = {
    "u120": "binpack1.txt",
    "u250": "binpack2.txt",
    "u500": "binpack3.txt",
    "u1000": "binpack4.txt",
}


def falkenauer(set_name: str):
    return read_orlib(FIXTURES / "binpacking" / SETS[set_name])


def test_reader_follows_the_file_layout():
    text = "2\n a \n10 3 2\n5\n5\n7\n b \n 8 2 1\n3\n4\n"
    first, second = parse_orlib(text)
    assert (first.name, first.capacity, first.sizes, first.best_known) == ("a", 10, (5, 5, 7), 2)
    assert (second.name, second.sizes) == ("b", (3, 4))
    with pytest.raises(ValueError, match="expected 3 item sizes"):
        parse_orlib("1\n a \n10 3 2\n5\n5\n")


@pytest.mark.parametrize("set_name", list(SETS))
def test_falkenauer_files_hold_twenty_instances_of_the_stated_size(set_name):
    instances = falkenauer(set_name)
    assert len(instances) == 20
    size = int(set_name[1:])
    for instance in instances:
        assert len(instance.sizes) == size and instance.capacity == 150
        assert martello_toth_bound(instance.sizes, 150) >= volume_bound(instance.sizes, 150)


def optimum_by_enumeration(sizes: list[int], capacity: int) -> int:
    """Fewest bins, by trying every assignment of items to bins (tiny inputs only)."""
    for bins in range(1, len(sizes) + 1):
        for assignment in itertools.product(range(bins), repeat=len(sizes)):
            loads = [0] * bins
            for item, chosen in zip(sizes, assignment, strict=True):
                loads[chosen] += item
            if max(loads) <= capacity:
                return bins
    return 0


@given(
    capacity=st.integers(min_value=5, max_value=30),
    data=st.data(),
)
@settings(max_examples=examples(60), deadline=None)
def test_bounds_and_arc_flow_agree_with_enumeration(capacity, data):
    sizes = data.draw(st.lists(st.integers(1, capacity), min_size=1, max_size=6))
    optimum = optimum_by_enumeration(sizes, capacity)
    assert volume_bound(sizes, capacity) <= martello_toth_bound(sizes, capacity) <= optimum
    graph = build_graph(sizes, capacity, arc_limit=10_000)
    assert graph is not None
    packing = solve_arc_flow(
        graph,
        [Item(s, 1) for s in sizes],
        bin_count=len(sizes),
        place_all=True,
        hint_bins=[[i] for i in range(len(sizes))],
        deadline=time.perf_counter() + 5,
    )
    assert packing is not None and packing.optimal
    assert len(packing.bins) == optimum == packing.bins_lower_bound
    assert sorted(i for b in packing.bins for i in b) == list(range(len(sizes)))
    assert all(sum(sizes[i] for i in b) <= capacity for b in packing.bins)


def test_gcd_reduction_shrinks_gpu_sized_graphs():
    gib = 1024
    graph = build_graph([45 * gib, 30 * gib, 25 * gib, 20 * gib, 15 * gib], 81920, 10_000)
    assert graph is not None
    assert graph.scale == 5 * gib and graph.capacity == 16
    # Only reachable fill levels become nodes, so few distinct sizes stay small even in MiB...
    few = build_graph([40001, 30007, 20011] * 20, 81559, 10_000)
    assert few is not None and len(few.nodes) < 20
    # ...but many distinct odd sizes have no common unit and too many levels.
    assert build_graph([10007 + 37 * i for i in range(60)], 81559, 10_000) is None


def test_when_not_everything_fits_the_heavier_items_are_packed():
    sizes = [6, 6, 6, 4]
    graph = build_graph(sizes, 10, 1000)
    assert graph is not None
    weights = [1, 1, 1, 5]
    packing = solve_arc_flow(
        graph,
        [Item(s, w) for s, w in zip(sizes, weights, strict=True)],
        bin_count=2,
        place_all=False,
        hint_bins=[[0], [1]],
        deadline=time.perf_counter() + 5,
    )
    assert packing is not None and packing.optimal
    packed = sorted(i for b in packing.bins for i in b)
    assert 3 in packed and len(packed) == 3


def bin_packing_request(sizes, capacity: int, cards: int, method: str, limit: float) -> dict:
    return {
        "gpus": [{"id": f"b:{i}", "host": "b", "memory_mib": capacity} for i in range(cards)],
        "models": [{"name": f"i{i}", "memory_mib": s} for i, s in enumerate(sizes)],
        "policy": {"method": method, "time_limit_s": limit},
    }


@pytest.mark.parametrize("name", ["u120_00", "u120_02", "u120_08", "u120_19"])
def test_auto_reaches_the_best_known_on_falkenauer_instances(name):
    instance = next(i for i in falkenauer("u120") if i.name == name)
    cards = 2 * volume_bound(instance.sizes, 150) + 1
    greedy = solve(bin_packing_request(instance.sizes, 150, cards, "greedy", 10))
    answer = solve(bin_packing_request(instance.sizes, 150, cards, "auto", 10))
    assert answer["unplaced"] == [] and greedy["unplaced"] == []
    load: dict[str, int] = {}
    for assignment in answer["assignments"]:
        load[assignment["gpus"][0]] = (
            load.get(assignment["gpus"][0], 0) + instance.sizes[int(assignment["model"][1:])]
        )
    assert max(load.values()) <= 150 and len(load) == answer["cards_used"]
    assert answer["cards_used"] <= instance.best_known
    assert answer["cards_used"] <= greedy["cards_used"]
    assert answer["optimal"] and answer["lower_bound"] == answer["cards_used"]
    assert answer["formulation"] == "arc-flow"
