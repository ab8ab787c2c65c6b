"""Best-fit decreasing with a penalty for opening an empty card.

Models are taken hardest first: those that take cards alone, then more cards per model, then
more memory. Each goes where it leaves the least free memory, but a card already in use always
beats an empty one, so empty cards stay whole for exclusive models and for later requests.

When the fleet is too small for everything, a second pass takes the models in priority order
(most important first, same tie-breaks), and the better of the two answers is kept, so the more
important models are the ones placed.
"""

from __future__ import annotations

import time

from console.placement.mig_profiles import MigProfile
from console.placement.objective import answer_key
from console.placement.plan import Plan
from console.placement.problem import ModelRequest, Problem


class GreedyTimeLimitExceeded(Exception):
    """The greedy pass, which every method runs first, did not end within the time limit."""


def greedy_plan(problem: Problem, deadline: float | None = None) -> Plan:
    """`deadline` (a time.perf_counter() value): past it, GreedyTimeLimitExceeded. Each model
    costs a pass over the fleet, so a request large enough could otherwise hold a CPU for as
    long as cards times models takes."""
    best: Plan | None = None
    for order in _orders(problem):
        plan = Plan(problem)
        _place_in_order(plan, order, deadline)
        if len(plan.assignments) == len(problem.models):
            return plan
        if best is None or answer_key(plan) > answer_key(best):
            best = plan
    assert best is not None
    return best


def fill_in(plan: Plan) -> int:
    """Place what still fits into an existing answer, most important first; returns how many.

    A solver stopped by its time limit can leave a model out that fits in the space left."""
    before = len(plan.assignments)
    waiting = [m for m in _orders(plan.problem)[-1] if m.index not in plan.assignments]
    _place_in_order(plan, waiting)
    return len(plan.assignments) - before


def _place_in_order(plan: Plan, order: list[ModelRequest], deadline: float | None = None) -> None:
    for model in order:
        if deadline is not None and time.perf_counter() > deadline:
            raise GreedyTimeLimitExceeded
        if model.isolation == "mig":
            _place_in_mig_slice(plan, model)
        else:
            _place_on_cards(plan, model)


def _orders(problem: Problem) -> list[list[ModelRequest]]:
    def hardest_first(model: ModelRequest) -> tuple[bool, int, int, int]:
        return (not problem.takes_cards_alone(model), -model.gpus, -model.memory_mib, model.index)

    by_size = sorted(problem.models, key=hardest_first)
    if len(problem.priority_levels) <= 1:
        return [by_size]
    by_priority = sorted(by_size, key=lambda model: model.priority)
    return [by_size, by_priority]


def _place_on_cards(plan: Plan, model: ModelRequest) -> None:
    """Pick, on each host, the `gpus` best-fitting cards; keep the host that opens the fewest
    empty cards and then leaves the least free memory on the cards it uses."""
    if model.gpus == 1:
        _place_on_one_card(plan, model)
        return
    best_cards: list[int] | None = None
    best_score: tuple[int, int] | None = None
    for cards in plan.problem.cards_by_host.values():
        eligible = [card for card in cards if plan.can_share(model, card)]
        if len(eligible) < model.gpus:
            continue
        eligible.sort(key=lambda card: (plan.is_empty(card), plan.free_mib[card], card))
        chosen = eligible[: model.gpus]
        score = (
            sum(plan.is_empty(card) for card in chosen),
            sum(plan.free_mib[card] for card in chosen),
        )
        if best_score is None or score < best_score:
            best_cards, best_score = chosen, score
    if best_cards is not None:
        plan.place(model, best_cards)


def _place_on_one_card(plan: Plan, model: ModelRequest) -> None:
    """The same rule for one card, in one pass over the fleet (the common case, kept fast)."""
    best_card = -1
    best_score = (True, 0)
    for card in range(len(plan.free_mib)):
        if not plan.can_share(model, card):
            continue
        score = (plan.is_empty(card), plan.free_mib[card])
        if best_card < 0 or score < best_score:
            best_card, best_score = card, score
    if best_card >= 0:
        plan.place(model, [best_card])


def _place_in_mig_slice(plan: Plan, model: ModelRequest) -> None:
    """Prefer a MIG card already in use, then the slice that wastes the least memory."""
    best: tuple[tuple[bool, int, int], MigProfile, int] | None = None
    for card in range(len(plan.problem.cards)):
        choice = plan.mig_slice_for(model, card)
        if choice is None:
            continue
        profile, start = choice
        score = (plan.is_empty(card), profile.memory_mib - model.memory_mib, card)
        if best is None or score < best[0]:
            best = (score, profile, start)
    if best is not None:
        (_, _, card), profile, start = best
        plan.place_mig(model, card, profile, start)
