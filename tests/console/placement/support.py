"""Helpers shared by the placement tests: fixture paths and JSON-level answer checks.

The checks read only the request and the answer, not the solver's internal state, so they test
the rules independently of plan.py.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from console.placement.mig import canonical_profile_name, mig_card_type

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures"
SCENARIOS = REPO / "inventory" / "scenarios"


def load_scenario(name: str) -> dict[str, Any]:
    return json.loads((SCENARIOS / name).read_text())


def takes_cards_alone(model: dict[str, Any], whole_card: bool) -> bool:
    return bool(model.get("exclusive")) or model.get("isolation") == "group" or whole_card


def answer_key(request: dict[str, Any], answer: dict[str, Any]) -> tuple[tuple[int, ...], int]:
    """Placed models per priority (most important first), then fewer cards: larger is better."""
    priority = {m["name"]: m.get("priority", 1) for m in request["models"]}
    levels = sorted(set(priority.values()))
    placed = Counter(priority[a["model"]] for a in answer["assignments"])
    return tuple(placed[level] for level in levels), -answer["cards_used"]


def check_answer(request: dict[str, Any], answer: dict[str, Any]) -> None:
    policy = request.get("policy", {})
    headroom = policy.get("headroom_mib", 0)
    whole_card = policy.get("whole_card", False)
    cards = {g["id"]: g for g in request["gpus"]}
    models = {m["name"]: m for m in request["models"]}

    placed = [a["model"] for a in answer["assignments"]]
    unplaced = [u["model"] for u in answer["unplaced"]]
    assert sorted(placed + unplaced) == sorted(models), "every model exactly once"
    for entry in answer["unplaced"]:
        assert any(ch.isdigit() for ch in entry["reason"]), entry

    on_card: dict[str, list[str]] = defaultdict(list)
    for assignment in answer["assignments"]:
        model = models[assignment["model"]]
        ids = assignment["gpus"]
        assert len(ids) == model.get("gpus", 1) == len(set(ids)), assignment
        assert len({cards[i]["host"] for i in ids}) == 1, "cards of one host"
        is_mig = model.get("isolation") == "mig"
        assert all(cards[i].get("mig", False) == is_mig for i in ids), assignment
        assert (assignment["mig_profile"] is not None) == is_mig
        assert (assignment["mig_start"] is not None) == is_mig
        has_mps = assignment["mps_active_thread_percentage"] is not None
        assert has_mps == (model.get("isolation") == "mps")
        if has_mps:
            assert 1 <= assignment["mps_active_thread_percentage"] <= 100
        for card_id in ids:
            on_card[card_id].append(model["name"])

    for card_id, card in cards.items():
        here = on_card[card_id]
        if not card.get("mig"):
            new = sum(models[name]["memory_mib"] for name in here)
            room = max(0, card["memory_mib"] - headroom - card.get("used_mib", 0))
            assert new <= room, f"{card_id} over capacity: {new} > {room}"
        if any(takes_cards_alone(models[name], whole_card) for name in here):
            assert len(here) == 1, f"{card_id} shared by a model that takes it alone: {here}"
            assert not card.get("models") and not card.get("mig_slices")

    by_id = {c["id"]: c for c in answer["cards"]}
    assert list(by_id) == list(cards), "one entry per card, in input order"
    for card_id, card in cards.items():
        if card.get("mig"):
            _check_mig_card(card, by_id[card_id], models, on_card[card_id])
        else:
            assert by_id[card_id]["mig_slices"] == []
    in_use = sum(
        bool(card.get("models") or card.get("mig_slices") or on_card[i])
        for i, card in cards.items()
    )
    assert answer["cards_used"] == in_use
    assert answer["lower_bound"] <= answer["cards_used"]
    assert answer["stranded_mib"] >= 0


def _check_mig_card(
    card: dict[str, Any], state: dict[str, Any], models: dict[str, Any], new_models: list[str]
) -> None:
    card_type = mig_card_type(card.get("type", ""), card["memory_mib"])
    taken: set[int] = set()
    existing = {
        (canonical_profile_name(s["profile"]), s["start"]) for s in card.get("mig_slices", [])
    }
    for piece in state["mig_slices"]:
        profile = card_type.profile(piece["profile"])
        assert profile is not None, piece
        assert piece["start"] in profile.starts, f"invalid start {piece}"
        slots = set(range(piece["start"], piece["start"] + profile.memory_slices))
        assert slots <= set(range(card_type.memory_slices))
        assert not slots & taken, f"overlapping slices on {card['id']}: {state['mig_slices']}"
        taken |= slots
        if (piece["profile"], piece["start"]) not in existing:
            assert piece["model"] in new_models
            assert profile.memory_mib >= models[piece["model"]]["memory_mib"]
            assert not profile.media_extensions
    assert len(state["mig_slices"]) == len(existing) + len(new_models)
