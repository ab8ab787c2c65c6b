"""What makes one answer better than another.

Placing models comes first, priority by priority: an answer that places more models of the most
important priority wins, whatever happens at less important priorities; at equal counts the next
priority decides, and so on. Only then do fewer cards in use win.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from console.placement.plan import Plan
from console.placement.problem import Problem

AnswerKey = tuple[tuple[int, ...], int]


def placed_per_priority(problem: Problem, placed: Iterable[int]) -> tuple[int, ...]:
    counts = Counter(problem.models[index].priority for index in placed)
    return tuple(counts[level] for level in problem.priority_levels)


def answer_key(plan: Plan) -> AnswerKey:
    """Larger is better."""
    return placed_per_priority(plan.problem, plan.assignments), -plan.cards_used()


# A solver objective sum_i weight_i * multiplier * placed_i must stay inside int64.
_OBJECTIVE_LIMIT = 2**60


def priority_weights(problem: Problem, multiplier: int) -> dict[int, int]:
    """Integer weights per priority such that one more model of a priority outweighs every model
    of all less important priorities together, so a weighted sum ranks answers like answer_key.

    The weights grow geometrically with the number of levels; once the objective (weights times
    `multiplier`, summed over the models) would leave int64 they stay strictly increasing but no
    longer dominate. Callers compare the result with answer_key anyway.
    """
    cap = max(1, _OBJECTIVE_LIMIT // (multiplier * max(1, len(problem.models))))
    per_level = Counter(model.priority for model in problem.models)
    weights: dict[int, int] = {}
    weight_below = 0
    previous = 0
    for level in reversed(problem.priority_levels):
        weight = max(previous + 1, min(weight_below + 1, cap))
        weights[level] = weight
        weight_below += per_level[level] * weight
        previous = weight
    return weights
