"""General placement model for CP-SAT: one boolean per (model, card) or (model, MIG slice).

It covers what the arc-flow model cannot: multi-card models (cards of one host), exclusive and
group isolation, MIG slices, existing tenants and cards of different sizes.

Objective, as in objective.py: priority-weighted models placed first, then cards in use, then
(MIG only) memory slices taken, so that a model gets the smallest profile unless a bigger one is
what lets more models in or frees a card. When the greedy answer already places every model,
every model is required to be placed and only the cards are minimised: a smaller model with a
bound CP-SAT can prove.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from console.placement.mig import (
    creatable_profiles,
    free_starts,
    occupied_mask,
    placement_count,
)
from console.placement.mig_profiles import MigCardType, MigProfile
from console.placement.objective import priority_weights
from console.placement.plan import Plan
from console.placement.problem import ModelRequest, Problem
from console.placement.solver_params import configure


@dataclass(frozen=True)
class AssignmentAnswer:
    plan: Plan
    optimal: bool
    cards_lower_bound: int | None  # proven, for placing every model, when place_all was asked


@dataclass(frozen=True)
class _MigOption:
    model: int
    card: int
    profile: MigProfile
    start: int
    chosen: cp_model.IntVar


@dataclass
class _Variables:
    on_card: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    mig: dict[int, list[_MigOption]] = field(default_factory=lambda: defaultdict(list))
    placed: dict[int, cp_model.IntVar] = field(default_factory=dict)
    opened: dict[int, cp_model.IntVar] = field(default_factory=dict)
    host_choice: dict[tuple[int, str], cp_model.IntVar] = field(default_factory=dict)


def solve_assignment(
    problem: Problem,
    hint: Plan,
    place_all: bool,
    deadline: float,
    cards_at_least: int,
) -> AssignmentAnswer | None:
    """Best answer found by the deadline (a time.perf_counter() value), or None if none."""
    model = cp_model.CpModel()
    variables = _Variables()
    try:
        for request in problem.models:
            _check_time(deadline)
            _add_model(model, problem, request, variables)
        _add_card_rules(model, problem, variables, deadline)
    except _OutOfTime:
        return None
    in_use_already = sum(card.has_tenants for card in problem.cards)
    cards_in_use = in_use_already + sum(variables.opened.values())
    slot_scale, slice_cost = _mig_cost(problem, variables)
    card_cost = slot_scale * cards_in_use + slice_cost
    if place_all:
        for placed in variables.placed.values():
            model.add(placed == 1)
        model.add(cards_in_use >= cards_at_least)
        _add_volume_cut(model, problem, variables)
        model.minimize(card_cost)
    else:
        big = slot_scale * (len(problem.cards) + 1)
        weights = priority_weights(problem, multiplier=big)
        value = sum(weights[problem.models[m].priority] * v for m, v in variables.placed.items())
        model.maximize(big * value - card_cost)
    _add_hint(model, problem, hint, variables)

    solver = cp_model.CpSolver()
    configure(solver, deadline)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    bound = None
    if place_all:
        # card_cost = slot_scale * cards + slice_cost, with slice_cost < slot_scale
        objective_bound = math.ceil(solver.best_objective_bound - 1e-6)
        bound = max(cards_at_least, -(-(objective_bound - slot_scale + 1) // slot_scale))
    return AssignmentAnswer(
        plan=_read_plan(problem, solver, variables),
        optimal=status == cp_model.OPTIMAL,
        cards_lower_bound=bound,
    )


def _add_model(
    model: cp_model.CpModel, problem: Problem, request: ModelRequest, variables: _Variables
) -> None:
    alone = problem.takes_cards_alone(request)
    if request.isolation == "mig":
        for card in problem.cards:
            if card.mig_type is None or (alone and card.has_tenants):
                continue
            occupied = occupied_mask(card.mig_slices)
            for profile in creatable_profiles(card.mig_type):
                if profile.memory_mib < request.memory_mib:
                    continue
                for start in free_starts(profile, occupied):
                    chosen = model.new_bool_var(f"mig_{request.index}_{card.index}_{start}")
                    option = _MigOption(request.index, card.index, profile, start, chosen)
                    variables.mig[request.index].append(option)
        options = [option.chosen for option in variables.mig[request.index]]
        if options:
            placed = model.new_bool_var(f"placed_{request.index}")
            model.add(cp_model.LinearExpr.sum(options) == placed)
            variables.placed[request.index] = placed
        return

    hosts: dict[str, list[int]] = {}
    for host, cards in problem.cards_by_host.items():
        eligible = [
            c
            for c in cards
            if not problem.cards[c].mig
            and problem.cards[c].free_mib >= request.memory_mib
            and not (alone and problem.cards[c].has_tenants)
        ]
        if len(eligible) >= request.gpus:
            hosts[host] = eligible
    if not hosts:
        return
    placed = model.new_bool_var(f"placed_{request.index}")
    variables.placed[request.index] = placed
    host_terms = []
    for host, cards in hosts.items():
        on_host = [
            variables.on_card.setdefault(
                (request.index, c), model.new_bool_var(f"on_{request.index}_{c}")
            )
            for c in cards
        ]
        if request.gpus == 1:
            host_terms.extend(on_host)
            continue
        chosen = model.new_bool_var(f"host_{request.index}_{host}")
        variables.host_choice[(request.index, host)] = chosen
        model.add(cp_model.LinearExpr.sum(on_host) == request.gpus * chosen)
        host_terms.append(chosen)
    model.add(cp_model.LinearExpr.sum(host_terms) == placed)


class _OutOfTime(Exception):
    pass


def _check_time(deadline: float) -> None:
    """Building costs microseconds per (model, card) pair in Python: on a big fleet it can use
    up the time limit, and then the greedy answer stands."""
    if time.perf_counter() > deadline:
        raise _OutOfTime


def _add_card_rules(
    model: cp_model.CpModel, problem: Problem, variables: _Variables, deadline: float
) -> None:
    """Memory, MIG slots, models that take cards alone, and which cards end up in use."""
    on_card: dict[int, list[tuple[ModelRequest, cp_model.IntVar]]] = defaultdict(list)
    for (m, c), variable in variables.on_card.items():
        on_card[c].append((problem.models[m], variable))
    mig_options_on: dict[int, list[_MigOption]] = defaultdict(list)
    for options in variables.mig.values():
        for option in options:
            on_card[option.card].append((problem.models[option.model], option.chosen))
            mig_options_on[option.card].append(option)
    for card in problem.cards:
        _check_time(deadline)
        present = on_card[card.index]
        if not present:
            continue
        choices = [variable for _, variable in present]
        if not card.mig:
            sizes = [request.memory_mib for request, _ in present]
            model.add(cp_model.LinearExpr.weighted_sum(choices, sizes) <= card.free_mib)
        alone = [v for request, v in present if problem.takes_cards_alone(request)]
        if alone and len(choices) > 1:
            # Held alone: once a model that takes the card alone is on it, nothing else is.
            held = model.new_bool_var(f"held_{card.index}")
            for variable in alone:
                model.add_implication(variable, held)
            count = len(choices)
            model.add(cp_model.LinearExpr.sum(choices) + (count - 1) * held <= count)
        if not card.has_tenants:
            opened = model.new_bool_var(f"open_{card.index}")
            variables.opened[card.index] = opened
            for variable in choices:
                model.add_implication(variable, opened)
    for card in problem.cards:
        if card.mig_type is None:
            continue
        options = mig_options_on[card.index]
        for slot in range(card.mig_type.memory_slices):
            covering = [o.chosen for o in options if o.profile.slot_mask(o.start) >> slot & 1]
            if len(covering) > 1:
                model.add(sum(covering) <= 1)


def _mig_cost(problem: Problem, variables: _Variables) -> tuple[int, cp_model.LinearExpr | int]:
    """(scale, cost of the chosen slices), with every card worth more than all slice costs.

    A slice costs its size first (memory slices, then compute slices: the smallest profile
    wins, as in greedy), then the placements it blocks on an empty card of its type, which
    steers starts the way greedy picks them: small instances away from slice 0, where the 4g and
    7g profiles must start.
    """
    options = [o for opts in variables.mig.values() for o in opts]
    if not options:
        return 1, 0
    per_size_step = 1 + max(placement_count(t) for t in _mig_types(problem))
    # Per card, sizes add up to at most 9 * memory slices (8 per memory slice, plus at most one
    # compute slice per memory slice), and blocked placements to less than one step per slice.
    scale = 1 + sum(10 * t.memory_slices * per_size_step for t in _mig_types(problem))
    cost = sum(
        (_size(o.profile) * per_size_step + _blocked(problem, o)) * o.chosen for o in options
    )
    return scale, cost


def _size(profile: MigProfile) -> int:
    return 8 * profile.memory_slices + profile.compute_slices


def _mig_types(problem: Problem) -> list[MigCardType]:
    return [card.mig_type for card in problem.cards if card.mig_type is not None]


def _blocked(problem: Problem, option: _MigOption) -> int:
    card_type = problem.cards[option.card].mig_type
    assert card_type is not None
    return placement_count(card_type) - placement_count(
        card_type, option.profile.slot_mask(option.start)
    )


def _add_volume_cut(model: cp_model.CpModel, problem: Problem, variables: _Variables) -> None:
    """The cards in use must hold the memory of every shared model: a cut the LP relaxation of
    the assignment model does not see by itself, and which lifts its bound to the volume bound."""
    demand = sum(
        r.memory_mib * r.gpus
        for r in problem.models
        if r.isolation != "mig" and r.index in variables.placed
    )
    if demand == 0:
        return
    offered = [
        card.free_mib * (1 if card.has_tenants else variables.opened[card.index])
        for card in problem.cards
        if not card.mig and (card.has_tenants or card.index in variables.opened)
    ]
    model.add(sum(offered) >= demand)


def _add_hint(model: cp_model.CpModel, problem: Problem, hint: Plan, variables: _Variables) -> None:
    for (m, c), variable in variables.on_card.items():
        assignment = hint.assignments.get(m)
        model.add_hint(variable, assignment is not None and c in assignment.cards)
    for (m, host), variable in variables.host_choice.items():
        assignment = hint.assignments.get(m)
        on_host = assignment is not None and problem.cards[assignment.cards[0]].host == host
        model.add_hint(variable, on_host)
    for m, options in variables.mig.items():
        assignment = hint.assignments.get(m)
        for option in options:
            model.add_hint(
                option.chosen,
                assignment is not None
                and assignment.cards == (option.card,)
                and assignment.mig_profile == option.profile
                and assignment.mig_start == option.start,
            )
    for m, variable in variables.placed.items():
        model.add_hint(variable, m in hint.assignments)
    for c, variable in variables.opened.items():
        model.add_hint(variable, not hint.is_empty(c))


def _read_plan(problem: Problem, solver: cp_model.CpSolver, variables: _Variables) -> Plan:
    plan = Plan(problem)
    cards_of: dict[int, list[int]] = defaultdict(list)
    for (m, c), variable in variables.on_card.items():
        if solver.boolean_value(variable):
            cards_of[m].append(c)
    for m, cards in sorted(cards_of.items()):
        plan.place(problem.models[m], cards)
    for m, options in sorted(variables.mig.items()):
        for option in options:
            if solver.boolean_value(option.chosen):
                plan.place_mig(problem.models[m], option.card, option.profile, option.start)
    return plan
