"""Entry point: solve(request) -> answer, both plain JSON-shaped dicts.

Flow: validate; run best-fit decreasing; unless the method is "greedy" (or, for "auto", the
greedy answer already meets the lower bound), run the exact model for what is left of the time
limit, seeded with the greedy answer; keep the better of the two answers (objective.py), so the
result is never worse than greedy.
"""

from __future__ import annotations

import time
from typing import Any

from console.placement.bounds import cards_lower_bound
from console.placement.exact import solve_exactly
from console.placement.greedy import GreedyTimeLimitExceeded, fill_in, greedy_plan
from console.placement.objective import answer_key
from console.placement.outcome import Outcome
from console.placement.problem import Problem
from console.placement.report import build_report
from console.placement.schema import FieldError, PlacementInputError, validate_problem

REPORT_RESERVE_S = 0.05
# Part of the time limit the relaxed packing bound may take before the exact solver runs.
PACKING_BOUND_SHARE = 0.2


def solve(request: dict[str, Any]) -> dict[str, Any]:
    """Place the request's models on its cards. Raises PlacementInputError on bad input, and
    when even the greedy answer takes longer than the time limit (no answer to give)."""
    started = time.perf_counter()
    problem = validate_problem(request)
    try:
        outcome = place(problem, started)
    except GreedyTimeLimitExceeded:
        limit = problem.policy.time_limit_s
        size = f"{len(problem.cards)} cards x {len(problem.models)} models"
        raise PlacementInputError(
            [FieldError("policy.time_limit_s",
                        f"no answer within {limit:g} s for {size}: send fewer, or allow longer")]
        ) from None  # fmt: skip
    return build_report(outcome, round((time.perf_counter() - started) * 1000))


def place(problem: Problem, started: float) -> Outcome:
    # What follows the solver (filling in, the report) takes milliseconds: leave it that.
    deadline = started + problem.policy.time_limit_s - REPORT_RESERVE_S
    method = problem.policy.method
    greedy = greedy_plan(problem, deadline)
    places_all = len(greedy.assignments) == len(problem.models)
    bound = cards_lower_bound(problem, greedy.placed())
    if places_all and greedy.cards_used() > bound and method != "greedy":
        # A closer bound costs an arc-flow solve: worth it only when a solver run may follow.
        share = PACKING_BOUND_SHARE * (deadline - time.perf_counter())
        bound = cards_lower_bound(problem, greedy.placed(), time.perf_counter() + share)
    greedy_outcome = Outcome(
        plan=greedy,
        method="greedy",
        formulation="best-fit-decreasing",
        optimal=places_all and greedy.cards_used() == bound,
        lower_bound=bound,
    )
    if method == "greedy" or (method == "auto" and greedy_outcome.optimal):
        return greedy_outcome
    bound_for_all = bound if places_all else cards_lower_bound(problem, range(len(problem.models)))
    exact = solve_exactly(problem, greedy, deadline, bound_for_all)
    if exact is None:
        return greedy_outcome
    if fill_in(exact.plan):
        exact = Outcome(
            plan=exact.plan,
            method="exact",
            formulation=exact.formulation,
            optimal=False,
            lower_bound=cards_lower_bound(problem, exact.plan.placed()),
        )
    return exact if answer_key(exact.plan) >= answer_key(greedy) else greedy_outcome
