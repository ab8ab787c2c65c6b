"""Suggested CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for models with isolation "mps".

Rule: on each of its cards, a model's share of the SMs is its weight over the total weight of
everything on that card, where weight = memory_mib / (priority + 1): memory stands in for the
work a model brings, and a more important model (lower priority number) counts for more. Memory
already in use on the card (existing tenants) counts at the default priority. The percentage is
that share rounded up, at least 1, and for a multi-card model the smallest over its cards, so the
model never asks more of a card than its share there. Percentages of one card's clients add up to
about 100; MPS accepts oversubscription, so rounding up cannot starve anyone.
"""

from __future__ import annotations

import math

from console.placement.plan import Plan
from console.placement.schema import DEFAULT_PRIORITY


def _weight(memory_mib: int, priority: int) -> float:
    return memory_mib / (priority + 1)


def mps_percentages(plan: Plan) -> dict[int, int]:
    problem = plan.problem
    card_weight = []
    for card in problem.cards:
        total = _weight(card.used_mib, DEFAULT_PRIORITY)
        for index in plan.new_models[card.index]:
            model = problem.models[index]
            total += _weight(model.memory_mib, model.priority)
        card_weight.append(total)
    percentages: dict[int, int] = {}
    for index, assignment in plan.assignments.items():
        model = problem.models[index]
        if model.isolation != "mps":
            continue
        own = _weight(model.memory_mib, model.priority)
        shares = [own / card_weight[c] if card_weight[c] else 1.0 for c in assignment.cards]
        percentages[index] = max(1, min(100, math.ceil(100 * min(shares) - 1e-9)))
    return percentages
