"""What the answer says: priorities, MPS percentages, stranded memory, reasons, methods, time."""

from __future__ import annotations

import random

import pytest

from console.placement import solve, validate_problem
from console.placement.greedy import fill_in
from console.placement.objective import priority_weights
from console.placement.plan import Plan

from .support import check_answer


def cards(count: int, memory: int = 81920, hosts: int = 1) -> list[dict]:
    return [
        {"id": f"h{i % hosts}:{i}", "host": f"h{i % hosts}", "memory_mib": memory}
        for i in range(count)
    ]


def request(gpus: list[dict], models: list[dict], **policy) -> dict:
    return {
        "gpus": gpus,
        "models": models,
        "policy": {"method": "greedy", "time_limit_s": 2, **policy},
    }


@pytest.mark.parametrize("method", ["greedy", "exact", "auto"])
@pytest.mark.parametrize("important_first", [True, False])
def test_the_more_important_model_wins_the_last_card(method, important_first):
    models = [
        {"name": "important", "memory_mib": 60000, "priority": 0},
        {"name": "casual", "memory_mib": 70000, "priority": 3},
        {"name": "filler", "memory_mib": 50000, "priority": 1},
    ]
    if not important_first:
        models.reverse()
    req = request(cards(2), models, method=method)
    answer = solve(req)
    check_answer(req, answer)
    assert {a["model"] for a in answer["assignments"]} == {"important", "filler"}
    (left_out,) = answer["unplaced"]
    assert left_out["model"] == "casual"
    assert "needs 70000 MiB on one card; largest free is" in left_out["reason"]


@pytest.mark.parametrize("method", ["greedy", "exact", "auto"])
def test_a_model_larger_than_every_card_is_left_out_with_the_reason(method):
    # Identical empty cards and one-card models: plain bin packing but for the model that fits
    # nowhere, which must not break the packing bounds.
    gpus = [{**card, "used_mib": 2048} for card in cards(2)]
    models = [{"name": "huge", "memory_mib": 81920}, {"name": "small", "memory_mib": 1000}]
    req = request(gpus, models, method=method)
    answer = solve(req)
    check_answer(req, answer)
    assert [a["model"] for a in answer["assignments"]] == ["small"]
    (left_out,) = answer["unplaced"]
    assert left_out["model"] == "huge"
    assert "needs 81920 MiB on one card; largest free is 79872 MiB" in left_out["reason"]


def test_mps_percentages_follow_memory_over_priority():
    models = [
        {"name": "big", "memory_mib": 30000, "isolation": "mps", "priority": 1},
        {"name": "small", "memory_mib": 10000, "isolation": "mps", "priority": 1},
        {"name": "urgent", "memory_mib": 10000, "isolation": "mps", "priority": 0},
        {"name": "plain", "memory_mib": 1000},
    ]
    req = request(cards(2), models)
    answer = solve(req)
    check_answer(req, answer)
    share = {a["model"]: a["mps_active_thread_percentage"] for a in answer["assignments"]}
    assert len({a["gpus"][0] for a in answer["assignments"]}) == 1
    # weight = memory / (priority + 1): 15000, 5000, 10000 and 500 for "plain".
    total = 15000 + 5000 + 10000 + 500
    for name, weight in (("big", 15000), ("small", 5000), ("urgent", 10000)):
        assert share[name] == -(-100 * weight // total)
    assert share["plain"] is None


def test_an_mps_model_alone_on_its_card_gets_all_of_it():
    models = [{"name": "solo", "memory_mib": 50000, "isolation": "mps"}]
    answer = solve(request(cards(1), models))
    assert answer["assignments"][0]["mps_active_thread_percentage"] == 100


def test_mps_share_of_a_multi_card_model_is_its_smallest_share():
    gpus = cards(2)
    gpus[0]["used_mib"] = 40000
    models = [{"name": "tp", "memory_mib": 20000, "gpus": 2, "isolation": "mps"}]
    answer = solve(request(gpus, models))
    (assignment,) = answer["assignments"]
    # Card 0 holds 40000 MiB of others (weighted at the default priority, as is "tp").
    assert assignment["mps_active_thread_percentage"] == 34


def test_stranded_counts_locked_cards_and_fragments_too_small_for_any_model():
    models = [
        {"name": "solo", "memory_mib": 50000, "exclusive": True},
        {"name": "a", "memory_mib": 60000},
        {"name": "b", "memory_mib": 15000},
        {"name": "c", "memory_mib": 10000},
    ]
    answer = solve(request(cards(3), models))
    free = {c["id"]: c["free_mib"] for c in answer["cards"]}
    where = {a["model"]: a["gpus"][0] for a in answer["assignments"]}
    smallest = 10000
    expected = free[where["solo"]] + sum(
        f
        for card, f in free.items()
        if card != where["solo"] and f < smallest and any(w == card for w in where.values())
    )
    assert answer["stranded_mib"] == expected
    assert answer["stranded_mib"] >= 81920 - 50000


@pytest.mark.parametrize("isolation", ["group", "any"])
def test_exclusive_and_group_models_keep_their_cards_to_themselves(isolation):
    models = [
        {
            "name": "own",
            "memory_mib": 10000,
            "isolation": isolation,
            "exclusive": isolation == "any",
            "priority": 0,
        },
        {"name": "x", "memory_mib": 40000},
        {"name": "y", "memory_mib": 40000},
        {"name": "z", "memory_mib": 40000},
    ]
    req = request(cards(2), models, method="auto")
    answer = solve(req)
    check_answer(req, answer)
    (left_out,) = answer["unplaced"]
    assert "held alone by own" in left_out["reason"]


def test_multi_card_model_reason_names_the_best_host():
    gpus = cards(4, hosts=2)  # h0: cards 0 and 2, h1: cards 1 and 3
    gpus[0]["used_mib"] = 70000
    gpus[1]["used_mib"] = 70000
    models = [{"name": "tp3", "memory_mib": 20000, "gpus": 2}]
    answer = solve(request(gpus, models))
    (entry,) = answer["unplaced"]
    assert "needs 2 cards with >= 20000 MiB free each on one host" in entry["reason"]
    assert "has 1" in entry["reason"]


def test_existing_tenants_count_as_cards_in_use_and_take_new_models_first():
    gpus = cards(3)
    gpus[2].update(used_mib=20000, models=["legacy"])
    models = [{"name": "new", "memory_mib": 30000}]
    answer = solve(request(gpus, models))
    assert answer["assignments"][0]["gpus"] == ["h0:2"]
    assert answer["cards_used"] == 1 == answer["lower_bound"]
    assert answer["cards"][2]["models"] == ["legacy", "new"]
    assert answer["cards"][2]["used_mib"] == 50000


def test_greedy_method_never_runs_the_solver_and_auto_skips_it_when_greedy_is_proven():
    models = [{"name": f"m{i}", "memory_mib": 40960} for i in range(4)]
    greedy = solve(request(cards(4), models))
    auto = solve(request(cards(4), models, method="auto"))
    assert greedy["method"] == auto["method"] == "greedy"
    assert auto["optimal"] and auto["lower_bound"] == auto["cards_used"] == 2
    exact = solve(request(cards(4), models, method="exact"))
    assert exact["method"] == "exact" and exact["optimal"]


def test_auto_improves_on_best_fit_decreasing_where_it_is_not_optimal():
    # BFD puts 50 with 30 and then needs three bins; 50+25+25 / 30+30+40 fits in two.
    sizes = [50, 40, 30, 30, 25, 25]
    models = [{"name": f"i{i}", "memory_mib": s} for i, s in enumerate(sizes)]
    greedy = solve(request(cards(4, memory=100), models))
    auto = solve(request(cards(4, memory=100), models, method="auto"))
    assert greedy["cards_used"] == 3 and not greedy["optimal"]
    assert auto["cards_used"] == 2 and auto["optimal"] and auto["method"] == "exact"


def test_the_time_limit_bounds_the_solve():
    rng = random.Random(3)
    gpus = cards(64, memory=81559, hosts=8)
    models = [
        {
            "name": f"m{i}",
            "memory_mib": rng.randrange(1000, 40000),
            "gpus": rng.choice([1, 1, 1, 2]),
            "exclusive": rng.random() < 0.05,
        }
        for i in range(120)
    ]
    req = request(gpus, models, method="exact", time_limit_s=1)
    answer = solve(req)
    check_answer(req, answer)
    assert answer["solve_ms"] < 3000


def test_priority_weights_let_one_important_model_outweigh_all_less_important_ones():
    models = [{"name": f"m{i}", "memory_mib": 1, "priority": i % 4} for i in range(40)]
    problem = validate_problem(request(cards(1), models))
    weights = priority_weights(problem, multiplier=2)
    counts = {level: sum(m["priority"] == level for m in models) for level in range(4)}
    for level in range(4):
        below = sum(counts[q] * weights[q] for q in range(level + 1, 4))
        assert weights[level] > below


def test_fill_in_adds_what_still_fits_most_important_first():
    models = [
        {"name": "late", "memory_mib": 50000, "priority": 2},
        {"name": "first", "memory_mib": 50000, "priority": 0},
        {"name": "small", "memory_mib": 20000, "priority": 1},
    ]
    problem = validate_problem(request(cards(1), models))
    plan = Plan(problem)
    assert fill_in(plan) == 2
    assert {problem.models[m].name for m in plan.assignments} == {"first", "small"}
    assert fill_in(plan) == 0
