"""A placement with one change applied, to draw the "after" beside the "before" (pure).

Works on the request/answer pair that inventory.placement_state.current_placement returns and
console.placement.diagram draws.
"""

import copy
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class Placed:
    label: str
    memory_mib: int  # per card
    cards: tuple[str, ...]
    alone: bool = False  # GPU-group binding: nothing else may use the cards
    mig_start: int | None = None  # on a MIG card: the slice's start slot


def with_change(
    request: dict, answer: dict, *, drop: Collection[str] = (), add: Placed | None = None
) -> tuple[dict, dict]:
    """The placement with the models labelled `drop` gone (the one changed and those it
    replaces) and `add` placed."""
    request, answer = copy.deepcopy(request), copy.deepcopy(answer)
    cards = {card["id"]: card for card in answer["cards"]}
    for label in drop:
        _drop(request, answer, cards, label)
    if add is not None and add.mig_start is not None:
        for piece in cards[add.cards[0]].get("mig_slices", []):
            if piece["start"] == add.mig_start:
                piece["model"] = ", ".join(filter(None, [piece.get("model", ""), add.label]))
    elif add is not None:
        request["models"].append(
            {"name": add.label, "memory_mib": add.memory_mib, "gpus": len(add.cards)}
        )
        if add.alone:
            request.setdefault("exclusive_existing", []).append(add.label)
        answer["assignments"].append({"model": add.label, "gpus": list(add.cards)})
        for card_id in add.cards:
            card = cards[card_id]
            card["models"].append(add.label)
            card["used_mib"] += add.memory_mib
            card["free_mib"] = max(0, card["free_mib"] - add.memory_mib)
    return request, answer


def _drop(request: dict, answer: dict, cards: dict, label: str) -> None:
    dropped = next((m for m in request["models"] if m["name"] == label), None)
    request["models"] = [m for m in request["models"] if m["name"] != label]
    request["exclusive_existing"] = [
        name for name in request.get("exclusive_existing", []) if name != label
    ]
    for assignment in answer["assignments"]:
        if assignment["model"] != label:
            continue
        for card_id in assignment["gpus"]:
            card = cards[card_id]
            card["models"] = [name for name in card["models"] if name != label]
            if dropped is not None:
                card["used_mib"] -= dropped["memory_mib"]
                card["free_mib"] += dropped["memory_mib"]
    answer["assignments"] = [a for a in answer["assignments"] if a["model"] != label]
    for card in answer["cards"]:
        for piece in card.get("mig_slices", []):
            names = [n for n in piece.get("model", "").split(", ") if n and n != label]
            piece["model"] = ", ".join(names)
