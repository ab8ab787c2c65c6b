"""An answer together with how it was found and what is proven about it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from console.placement.plan import Plan

Formulation = Literal["best-fit-decreasing", "arc-flow", "cp-sat-assignment"]


@dataclass(frozen=True)
class Outcome:
    plan: Plan
    method: Literal["greedy", "exact"]
    formulation: Formulation
    optimal: bool
    # Proven lower bound on the cards in use for hosting the models this answer places.
    lower_bound: int
