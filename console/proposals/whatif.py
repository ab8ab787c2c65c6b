"""The what-if of a proposal not yet filed: its placement before and after, and the gates
run on it, with nothing kept.

The gates and the drawings read a proposal the way it is stored (its cards are a many-to-many,
its load tests rows), so the dry run stores the proposal inside a savepoint and always rolls
it back: no row, no audit entry and no queued task survive it, and the gates run exactly as
they will once it is filed.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from console.placement.diagram import Drawing
from console.proposals import gate_checks, placement
from console.proposals.gates import GateOutcome
from console.proposals.guided import KvRecommendation, kv_recommendation
from console.proposals.models import Proposal
from inventory.models import Deployment, Gpu


class _DryRun(Exception):
    """Raised inside the savepoint so that it rolls back whatever happens."""


@dataclass(frozen=True)
class WhatIf:
    before: Drawing | None
    after: Drawing | None
    outcomes: list[GateOutcome]
    solver_cards: list[str]
    kv: KvRecommendation | None
    elapsed_ms: int

    @property
    def passes(self) -> bool:
        return all(outcome.status.passed for outcome in self.outcomes)


def dry_run(
    proposal: Proposal,
    gpus: list[Gpu],
    replaces: list[Deployment] = (),
    now: dt.datetime | None = None,
) -> WhatIf:
    """The gates and drawings of `proposal` (unsaved, or an edit of a saved one held in
    memory) with `gpus` as its cards and `replaces` as the deployments it takes over from:
    stored like its cards, they leave their cards through the gates' one reading of what
    leaves (Proposal.leaving_ids) and the drawing's."""
    now = now or timezone.now()
    started = time.perf_counter()
    kept_pk, adding = proposal.pk, proposal._state.adding
    result: dict = {}
    try:
        with transaction.atomic():
            proposal.save()
            proposal.gpus.set(gpus)
            proposal.replaces.set(replaces)
            checked = gate_checks.check(proposal, now)
            if proposal.let_solver_choose:
                proposal.solver_gpus.set(checked.solver_gpus)
            before, after = placement.drawings(proposal)
            result = {
                "before": before,
                "after": after,
                "outcomes": checked.outcomes,
                "solver_cards": [str(gpu) for gpu in checked.solver_gpus],
                "kv": kv_recommendation(proposal, now),
            }
            raise _DryRun
    except _DryRun:
        pass
    finally:
        proposal.pk, proposal._state.adding = kept_pk, adding
    return WhatIf(elapsed_ms=round((time.perf_counter() - started) * 1000), **result)
