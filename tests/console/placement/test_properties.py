"""Property tests on random fleets and requests.

Every answer of every method keeps the rules (support.check_answer reads only the JSON);
auto is never worse than greedy; and on tiny inputs, exhaustive search confirms the answers
claimed optimal and the lower bounds.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.placement import solve, validate_problem
from console.placement.mig import choose_slice, creatable_profiles, mig_card_type
from console.placement.objective import answer_key as plan_key
from console.placement.plan import PlacementRuleError, Plan
from console.placement.problem import Problem
from tests.examples import examples

from .support import answer_key, check_answer

MIG_CARDS = [
    ("NVIDIA H100 80GB HBM3", 81559),
    ("A100-SXM4-80GB", 81920),
    ("A100-SXM4-40GB", 40960),
    ("NVIDIA H200", 143771),
    ("NVIDIA A30", 24258),
]
PLAIN_SIZES = [24576, 40960, 81559, 81920]
LIMIT_S = 0.5


@st.composite
def mig_card(draw: st.DrawFn, card_id: str, host: str) -> dict[str, Any]:
    type_name, memory = draw(st.sampled_from(MIG_CARDS))
    card_type = mig_card_type(type_name, memory)
    slices, occupied = [], 0
    for number in range(draw(st.integers(0, 3))):
        need = draw(st.integers(0, memory))
        choice = choose_slice(card_type, occupied, need)
        if choice is None:
            continue
        profile, start = choice
        occupied |= profile.slot_mask(start)
        slices.append({"profile": profile.name, "start": start, "model": f"{card_id}-t{number}"})
    card = {"id": card_id, "host": host, "type": type_name, "memory_mib": memory, "mig": True}
    if slices:
        card["mig_slices"] = slices
        card["models"] = [s["model"] for s in slices]
    return card


@st.composite
def plain_card(draw: st.DrawFn, card_id: str, host: str) -> dict[str, Any]:
    memory = draw(st.sampled_from(PLAIN_SIZES))
    used = draw(st.sampled_from([0, 0, 0, 2048, memory // 2]))
    card = {
        "id": card_id,
        "host": host,
        "type": "H100-SXM5-80GB",
        "memory_mib": memory,
        "used_mib": used,
    }
    if used and draw(st.booleans()):
        card["models"] = [f"{card_id}-tenant"]
    return card


@st.composite
def requests(
    draw: st.DrawFn,
    max_hosts: int = 3,
    max_cards: int = 4,
    max_models: int = 8,
    mig: bool = True,
) -> dict[str, Any]:
    gpus = []
    for h in range(draw(st.integers(1, max_hosts))):
        for c in range(draw(st.integers(1, max_cards))):
            make = mig_card if mig and draw(st.integers(0, 3)) == 0 else plain_card
            gpus.append(draw(make(f"h{h}:{c}", f"h{h}")))
    largest = max(g["memory_mib"] for g in gpus)
    biggest_host = max(sum(g["host"] == f"h{h}" for g in gpus) for h in range(max_hosts))
    models = []
    for i in range(draw(st.integers(0, max_models))):
        isolation = draw(st.sampled_from(["any", "any", "mps", "group"] + ["mig"] * mig))
        models.append(
            {
                "name": f"m{i}",
                # Sizes in 512 MiB steps often share a unit, so the arc-flow path runs too.
                "memory_mib": draw(
                    st.one_of(
                        st.integers(0, largest // 512).map(lambda n: n * 512),
                        st.integers(0, largest),
                    )
                ),
                "gpus": 1 if isolation == "mig" else draw(st.integers(1, min(3, biggest_host))),
                "exclusive": draw(st.integers(0, 4)) == 0,
                "priority": draw(st.integers(0, 2)),
                "isolation": isolation,
            }
        )
    policy = {
        "method": "auto",
        "time_limit_s": LIMIT_S,
        "headroom_mib": draw(st.sampled_from([0, 0, 1024, 4096])),
        "whole_card": draw(st.integers(0, 6)) == 0,
    }
    return {"gpus": gpus, "models": models, "policy": policy}


@st.composite
def bin_packing_requests(draw: st.DrawFn) -> dict[str, Any]:
    """Identical empty cards and single-card shareable models: the arc-flow case."""
    capacity = draw(st.sampled_from([81920, 40960, 150]))
    unit = draw(st.sampled_from([1, 512, 1024])) if capacity > 150 else 1
    cards = draw(st.integers(1, 6))
    sizes = draw(st.lists(st.integers(1, capacity // unit), min_size=1, max_size=12))
    return {
        "gpus": [
            {"id": f"b:{i}", "host": f"h{i % 2}", "memory_mib": capacity} for i in range(cards)
        ],
        "models": [
            {"name": f"m{i}", "memory_mib": s * unit, "priority": i % 2}
            for i, s in enumerate(sizes)
        ],
        "policy": {"method": "auto", "time_limit_s": LIMIT_S},
    }


def solve_with(request: dict[str, Any], method: str) -> dict[str, Any]:
    return solve({**request, "policy": {**request["policy"], "method": method}})


@given(request=st.one_of(requests(), bin_packing_requests()))
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_method_keeps_the_rules_and_auto_is_never_worse_than_greedy(request):
    answers = {method: solve_with(request, method) for method in ("greedy", "exact", "auto")}
    for answer in answers.values():
        check_answer(request, answer)
    greedy_key = answer_key(request, answers["greedy"])
    assert answer_key(request, answers["auto"]) >= greedy_key
    assert answer_key(request, answers["exact"]) >= greedy_key
    placed_auto, cards_auto = answer_key(request, answers["auto"])
    if placed_auto == greedy_key[0]:
        assert -cards_auto <= answers["greedy"]["cards_used"]


def options(problem: Problem, model_index: int):
    model = problem.models[model_index]
    if model.isolation == "mig":
        for card in problem.cards:
            if card.mig_type is not None:
                for profile in creatable_profiles(card.mig_type):
                    for start in profile.starts:
                        yield ("mig", card.index, profile, start)
        return
    for cards in problem.cards_by_host.values():
        for chosen in itertools.combinations(cards, model.gpus):
            yield ("cards", chosen)


def replay(problem: Problem, choices: list) -> Plan:
    plan = Plan(problem)
    for index, option in enumerate(choices):
        if option is None:
            continue
        model = problem.models[index]
        if option[0] == "mig":
            _, card, profile, start = option
            plan.place_mig(model, card, profile, start)
        else:
            plan.place(model, list(option[1]))
    return plan


def every_answer(problem: Problem, choices: list | None = None):
    """Every legal answer (as a Plan), by trying every option for every model in turn."""
    choices = choices or []
    if len(choices) == len(problem.models):
        yield replay(problem, choices)
        return
    yield from every_answer(problem, [*choices, None])
    for option in options(problem, len(choices)):
        try:
            replay(problem, [*choices, option])
        except PlacementRuleError:
            continue
        yield from every_answer(problem, [*choices, option])


@given(request=requests(max_hosts=2, max_cards=2, max_models=4))
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_claims_of_optimality_and_lower_bounds_hold_against_exhaustive_search(request):
    problem = validate_problem(request)
    fewest_cards: dict[frozenset[str], int] = {}
    best = None
    for plan in every_answer(problem):
        placed = frozenset(problem.models[m].name for m in plan.assignments)
        fewest_cards[placed] = min(fewest_cards.get(placed, 10**9), plan.cards_used())
        best = max(best, plan_key(plan)) if best is not None else plan_key(plan)
    for method in ("greedy", "exact", "auto"):
        answer = solve_with(request, method)
        key = answer_key(request, answer)
        assert key <= best
        if answer["optimal"]:
            assert key == best, method
        placed = frozenset(a["model"] for a in answer["assignments"])
        assert answer["lower_bound"] <= fewest_cards[placed], method
    # Tiny models are proven by the exact method well inside the limit.
    assert solve_with(request, "exact")["optimal"]
