"""Exact placement: picks the model that suits the problem, seeds it with the greedy answer.

Plain bin packing (single-card shareable models on identical empty cards) goes to the arc-flow
model when its graph, after dividing sizes by their GCD, stays small; it proves optimality where
an assignment model only closes the gap slowly. Everything else, and bin packing whose graph
would be too big (many distinct sizes without a common unit), goes to the CP-SAT assignment
model.
"""

from __future__ import annotations

from collections import defaultdict

from console.placement.arcflow import ARC_LIMIT, Item, build_graph, solve_arc_flow
from console.placement.assignment import solve_assignment
from console.placement.bounds import cards_lower_bound
from console.placement.objective import priority_weights
from console.placement.outcome import Formulation, Outcome
from console.placement.plan import Plan
from console.placement.problem import Problem


def solve_exactly(
    problem: Problem, greedy: Plan, deadline: float, cards_at_least: int
) -> Outcome | None:
    """The solver's best answer by the deadline (a time.perf_counter() value), or None.

    `cards_at_least` is a known lower bound on the cards needed to place every model.
    """
    place_all = len(greedy.assignments) == len(problem.models)
    if problem.bin_capacity is not None:
        sizes = [model.memory_mib for model in problem.models]
        graph = build_graph(sizes, problem.bin_capacity, ARC_LIMIT)
        if graph is not None:
            bin_count = len(problem.cards)
            weights = priority_weights(problem, multiplier=bin_count + 1)
            items = [Item(m.memory_mib, weights[m.priority]) for m in problem.models]
            packing = solve_arc_flow(
                graph,
                items,
                bin_count=bin_count,
                place_all=place_all,
                hint_bins=_bins_of(greedy),
                deadline=deadline,
                bins_at_least=cards_at_least if place_all else 0,
            )
            if packing is None:
                return None
            plan = Plan(problem)
            # The cards are identical, so bin i can be card i.
            for card, contents in enumerate(packing.bins):
                for model in contents:
                    plan.place(problem.models[model], [card])
            return _outcome(plan, "arc-flow", packing.optimal, packing.bins_lower_bound)
    answer = solve_assignment(problem, greedy, place_all, deadline, cards_at_least)
    if answer is None:
        return None
    return _outcome(answer.plan, "cp-sat-assignment", answer.optimal, answer.cards_lower_bound)


def _bins_of(plan: Plan) -> list[list[int]]:
    bins: dict[int, list[int]] = defaultdict(list)
    for model, assignment in plan.assignments.items():
        bins[assignment.cards[0]].append(model)
    return list(bins.values())


def _outcome(
    plan: Plan, formulation: Formulation, optimal: bool, bound_for_all: int | None
) -> Outcome:
    problem = plan.problem
    bound = cards_lower_bound(problem, plan.placed())
    if bound_for_all is not None and len(plan.assignments) == len(problem.models):
        bound = max(bound, bound_for_all)
    if optimal:
        # Nothing places these models (or as many of each priority) on fewer cards.
        bound = plan.cards_used()
    return Outcome(plan, "exact", formulation, optimal, bound)
