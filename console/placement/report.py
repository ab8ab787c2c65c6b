"""The JSON answer: assignments, unplaced models with reasons, per-card state, figures."""

from __future__ import annotations

from typing import Any

from console.placement.mig import creatable_profiles, free_slots
from console.placement.mps import mps_percentages
from console.placement.outcome import Outcome
from console.placement.plan import Plan
from console.placement.problem import Card
from console.placement.reasons import unplaced_reason
from console.placement.stranded import stranded_mib
from inventory.analytics.reasons import render


def build_report(outcome: Outcome, solve_ms: int) -> dict[str, Any]:
    plan = outcome.plan
    problem = plan.problem
    percentages = mps_percentages(plan)
    assignments = []
    unplaced = []
    for model in problem.models:
        assignment = plan.assignments.get(model.index)
        if assignment is None:
            reason = unplaced_reason(plan, model)
            unplaced.append(
                {"model": model.name, "reason": render(reason), "reason_detail": reason.to_json()}
            )
            continue
        profile = assignment.mig_profile
        assignments.append(
            {
                "model": model.name,
                "gpus": [problem.cards[card].id for card in assignment.cards],
                "mig_profile": profile.name if profile else None,
                "mig_start": assignment.mig_start,
                "mps_active_thread_percentage": percentages.get(model.index),
            }
        )
    return {
        "assignments": assignments,
        "unplaced": unplaced,
        "cards": [_card_state(plan, card) for card in problem.cards],
        "cards_used": plan.cards_used(),
        "lower_bound": outcome.lower_bound,
        "optimal": outcome.optimal,
        "method": outcome.method,
        "formulation": outcome.formulation,
        "stranded_mib": stranded_mib(plan),
        "solve_ms": solve_ms,
    }


def _card_state(plan: Plan, card: Card) -> dict[str, Any]:
    problem = plan.problem
    new = [problem.models[m] for m in plan.new_models[card.index]]
    slice_models = [s.model for s in card.mig_slices if s.model and s.model not in card.tenants]
    slices = [
        {"profile": s.profile.name, "start": s.start, "model": s.model} for s in card.mig_slices
    ]
    for model in new:
        assignment = plan.assignments[model.index]
        if assignment.mig_profile is not None:
            slices.append(
                {
                    "profile": assignment.mig_profile.name,
                    "start": assignment.mig_start,
                    "model": model.name,
                }
            )
    used = card.used_mib + sum(model.memory_mib for model in new)
    if card.mig_type is not None:
        # Free memory on a MIG card is what its unallocated memory slices hold.
        one_slice = min(p.memory_mib for p in creatable_profiles(card.mig_type))
        free = one_slice * len(free_slots(card.mig_type, plan.slot_masks[card.index]))
    else:
        free = plan.free_mib[card.index]
    return {
        "id": card.id,
        "used_mib": used,
        "free_mib": free,
        "models": [*card.tenants, *slice_models, *(model.name for model in new)],
        "mig_slices": sorted(slices, key=lambda s: s["start"]),
    }
