"""Stranded memory: memory on cards in use that no model of this request could use.

stranded_mib is the sum of
  - the free memory of every card held by a model that takes it alone (exclusive, isolation
    "group", or every card under the whole_card policy): nobody else may use it;
  - on other non-MIG cards in use, the free memory when it is smaller than the smallest
    shareable model of the request: a fragment too small for any of them;
  - inside each new MIG slice, the profile's memory beyond what its model needs: a hardware
    partition nobody else can use.
Free memory is after the headroom. Empty cards strand nothing: they stay whole for later.
"""

from __future__ import annotations

from console.placement.plan import Plan


def stranded_mib(plan: Plan) -> int:
    problem = plan.problem
    shareable = [
        m.memory_mib
        for m in problem.models
        if m.isolation != "mig" and not problem.takes_cards_alone(m)
    ]
    smallest = min(shareable, default=None)
    total = 0
    for card in problem.cards:
        if card.mig or plan.is_empty(card.index):
            continue
        free = plan.free_mib[card.index]
        if plan.locked[card.index] or smallest is None or free < smallest:
            total += free
    for index, assignment in plan.assignments.items():
        if assignment.mig_profile is not None:
            total += assignment.mig_profile.memory_mib - problem.models[index].memory_mib
    return total
