"""The two field-report scenarios in shared/scenarios."""

from __future__ import annotations

import copy

import pytest

from console.placement import solve

from .support import check_answer, load_scenario


@pytest.mark.parametrize("method", ["greedy", "exact", "auto"])
def test_five_models_pack_onto_two_cards_and_leave_one_empty(method):
    request = load_scenario("seed-3xa100-5models.json")
    request["policy"]["method"] = method
    answer = solve(request)
    check_answer(request, answer)
    assert answer["unplaced"] == []
    assert answer["cards_used"] == 2
    assert answer["lower_bound"] == 2 and answer["optimal"]
    empty = [c for c in answer["cards"] if not c["models"]]
    assert len(empty) == 1 and empty[0]["free_mib"] == empty[0]["used_mib"] + 81920


def test_whole_card_leaves_models_out_and_says_why_in_numbers():
    request = load_scenario("seed-3xa100-5models.json")
    request["policy"]["whole_card"] = True
    answer = solve(request)
    check_answer(request, answer)
    assert len(answer["unplaced"]) >= 1
    assert answer["cards_used"] == 3
    sizes = {m["name"]: m["memory_mib"] for m in request["models"]}
    placed = {a["model"] for a in answer["assignments"]}
    # The more important models are the ones placed.
    priorities = {m["name"]: m["priority"] for m in request["models"]}
    assert max(priorities[m] for m in placed) <= min(
        priorities[u["model"]] for u in answer["unplaced"]
    )
    for entry in answer["unplaced"]:
        reason = entry["reason"]
        assert str(sizes[entry["model"]]) in reason
        assert "whole_card" in reason
        # Each taken card is named with the model that holds it and the memory it strands.
        for card in answer["cards"]:
            assert card["id"] in reason
            assert f"{card['free_mib']} MiB free" in reason
    # Every free MiB of a card held alone is stranded.
    assert answer["stranded_mib"] == sum(c["free_mib"] for c in answer["cards"] if c["models"])


def test_packing_strands_less_than_whole_cards():
    request = load_scenario("seed-3xa100-5models.json")
    packed = solve(request)
    whole = copy.deepcopy(request)
    whole["policy"]["whole_card"] = True
    assert solve(whole)["stranded_mib"] > packed["stranded_mib"]


@pytest.mark.parametrize("method", ["greedy", "exact", "auto"])
def test_eight_card_server_gives_each_model_its_own_group(method):
    request = load_scenario("seed-8card-3models.json")
    request["policy"]["method"] = method
    answer = solve(request)
    check_answer(request, answer)
    assert answer["unplaced"] == []
    groups = [set(a["gpus"]) for a in answer["assignments"]]
    wanted = {m["name"]: m["gpus"] for m in request["models"]}
    assert [len(g) for g in groups] == [wanted[a["model"]] for a in answer["assignments"]]
    assert sum(len(g) for g in groups) == len(set().union(*groups)) == 8
    headroom = request["policy"]["headroom_mib"]
    for card in answer["cards"]:
        assert card["used_mib"] + card["free_mib"] + headroom == 81559


def test_headroom_leaves_a_model_out_that_would_fit_without_it():
    request = load_scenario("seed-8card-3models.json")
    biggest = max(request["models"], key=lambda m: m["memory_mib"])
    biggest["memory_mib"] = 81559 - request["policy"]["headroom_mib"] + 1
    answer = solve(request)
    check_answer(request, answer)
    assert [u["model"] for u in answer["unplaced"]] == [biggest["name"]]
    assert "headroom" in answer["unplaced"][0]["reason"]
    request["policy"]["headroom_mib"] = 0
    assert solve(request)["unplaced"] == []
