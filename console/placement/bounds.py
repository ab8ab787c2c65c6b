"""Lower bounds on the number of cards (bins) in use.

L1 is the volume bound. L2 is Martello and Toth's bound (1990): for a threshold k, items larger
than C - k cannot share a bin with any item >= k; items in (C/2, C - k] each need their own bin
and leave room that only items in [k, C/2] can fill; what those small items do not fit into that
room needs further bins. L2 is the best of these over every threshold, and never below L1.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable
from itertools import accumulate

from console.placement.arcflow import ARC_LIMIT, Item, build_graph, solve_arc_flow
from console.placement.mig import free_slots, occupied_mask, smallest_fitting_profile
from console.placement.problem import ModelRequest, Problem


def volume_bound(sizes: Iterable[int], capacity: int) -> int:
    total = sum(sizes)
    return -(-total // capacity) if total > 0 else 0


def martello_toth_bound(sizes: Iterable[int], capacity: int) -> int:
    """L2 of Martello and Toth; every size must be between 0 and capacity."""
    ordered = sorted(s for s in sizes if s > 0)
    if not ordered:
        return 0
    if ordered[-1] > capacity:
        raise ValueError(f"item of size {ordered[-1]} is larger than the capacity {capacity}")
    prefix = [0, *accumulate(ordered)]

    def total_between(low_index: int, high_index: int) -> int:
        return prefix[high_index] - prefix[low_index]

    count = len(ordered)
    half_index = bisect_right(ordered, capacity // 2)  # items with size <= C/2
    best = volume_bound(ordered, capacity)
    thresholds = {0, *ordered[:half_index]}
    for threshold in thresholds:
        # N1: size > C - k; N2: C/2 < size <= C - k; N3: k <= size <= C/2.
        n2_start = half_index
        n1_start = bisect_right(ordered, capacity - threshold)
        n3_start = bisect_left(ordered, threshold) if threshold > 0 else 0
        n1 = count - n1_start
        n2 = n1_start - n2_start
        n2_room = n2 * capacity - total_between(n2_start, n1_start)
        n3_volume = total_between(n3_start, half_index)
        overflow = n3_volume - n2_room
        extra = -(-overflow // capacity) if overflow > 0 else 0
        best = max(best, n1 + n2 + extra)
    return best


def cards_lower_bound(
    problem: Problem, placed: Collection[int], packing_deadline: float | None = None
) -> int:
    """A lower bound on the cards in use in any answer that places exactly these models.

    Cards with existing models are in use whatever happens. Models that take cards alone need
    that many further cards of their own. Shared models need enough further cards for the
    memory the in-use cards cannot hold (counting the largest cards first), and MIG models
    enough further MIG cards for the memory slices of their smallest fitting profiles. When the
    problem is plain bin packing, Martello and Toth's L2 applies directly.

    With a `packing_deadline` (a time.perf_counter() value), and when the non-MIG cards are
    identical and empty, the shared models' memory per card is also packed optimally by the
    arc-flow model, ignoring which host each card is on: a relaxation, so its proven number of
    bins is a bound too, and much closer than the volume when big models cannot pair up.
    """
    models = [problem.models[index] for index in placed]
    if not models:
        return sum(card.has_tenants for card in problem.cards)
    if problem.bin_capacity is not None:
        return martello_toth_bound((m.memory_mib for m in models), problem.bin_capacity)
    in_use = [card for card in problem.cards if card.has_tenants]
    alone = [m for m in models if problem.takes_cards_alone(m)]
    sharing = [m for m in models if not problem.takes_cards_alone(m)]
    shared = [m for m in sharing if m.isolation != "mig"]
    shared_mig = [m for m in sharing if m.isolation == "mig"]
    bound = len(in_use) + sum(m.gpus for m in alone)

    volume = sum(m.memory_mib * m.gpus for m in shared)
    volume -= sum(card.free_mib for card in in_use if not card.mig)
    further = 0
    if volume > 0:
        for free in sorted(
            (c.free_mib for c in problem.cards if not c.has_tenants and not c.mig), reverse=True
        ):
            further += 1
            volume -= free
            if volume <= 0:
                break
    if shared and not any(not card.mig for card in in_use):
        further = max(further, max(m.gpus for m in shared))
    if packing_deadline is not None:
        further = max(further, _packed_shared_cards(problem, shared, packing_deadline))
    bound += further + _further_mig_cards(problem, shared_mig)
    return max(bound, max(m.gpus for m in models))


def _packed_shared_cards(problem: Problem, shared: list[ModelRequest], deadline: float) -> int:
    """Proven fewest identical cards for the shared models' per-card memory (0 if unknown)."""
    plain = [card for card in problem.cards if not card.mig]
    if not plain or any(c.has_tenants for c in plain) or len({c.free_mib for c in plain}) != 1:
        return 0
    # Models of no memory need no room: dropping them only weakens the bound.
    sizes = [m.memory_mib for m in shared for _ in range(m.gpus) if m.memory_mib > 0]
    graph = build_graph(sizes, plain[0].free_mib, ARC_LIMIT) if sizes else None
    if graph is None:
        return 0
    packing = solve_arc_flow(
        graph,
        [Item(size, 1) for size in sizes],
        bin_count=len(plain),
        place_all=True,
        hint_bins=[],
        deadline=deadline,
    )
    if packing is None or packing.bins_lower_bound is None:
        return 0
    return packing.bins_lower_bound


def _further_mig_cards(problem: Problem, models: list[ModelRequest]) -> int:
    mig_cards = [card for card in problem.cards if card.mig_type is not None]
    if not models or not mig_cards:
        return 0
    card_types = {card.mig_type.name: card.mig_type for card in mig_cards if card.mig_type}
    slices_needed = 0
    for model in models:
        fitting = [smallest_fitting_profile(t, model.memory_mib) for t in card_types.values()]
        slices_needed += min((p.memory_slices for p in fitting if p is not None), default=0)
    slices_free = sum(
        len(free_slots(card.mig_type, occupied_mask(card.mig_slices)))
        for card in mig_cards
        if card.has_tenants and card.mig_type is not None
    )
    missing = slices_needed - slices_free
    if missing <= 0:
        return 0
    per_card = max(t.memory_slices for t in card_types.values())
    return -(-missing // per_card)
