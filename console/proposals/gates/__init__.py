"""The gates a placement proposal must pass before an approver may sign it off.

Each gate module is pure (plain numbers and dataclasses in, a :class:`GateOutcome` out);
:mod:`console.proposals.gate_checks` reads the database and runs them. A gate says what it
found as reasons (inventory.analytics.reasons): a code and its figures, from the module's own
catalogue (``MESSAGES``, registered at import), so a result stored once reads in every
language.
"""

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from inventory.analytics.reasons import Reason, gettext_noop, register

MESSAGES = register(
    {
        # Two sentences of one reason; a language that runs sentences together drops the space.
        "gate.then": gettext_noop("{first} {then}"),
        "gate.not_applicable": gettext_noop(
            "A removal frees memory and SMs and adds no tenant: nothing to check."
        ),
        "gate.error": gettext_noop("The gate could not be evaluated: {error}"),
    }
)


def then(first: Reason | str, *more: Reason | str) -> Reason | str:
    """The reasons one after the other, as sentences of one summary."""
    for sentence in more:
        first = Reason("gate.then", {"first": first, "then": sentence})
    return first


class GateStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    # The gate's question does not arise (a removal adds no memory); counts as a pass.
    NOT_APPLICABLE = "n/a"
    # The gate could not be evaluated (a bug, or data that broke it); counts as a fail.
    ERROR = "error"

    @property
    def passed(self) -> bool:
        return self in (GateStatus.PASS, GateStatus.NOT_APPLICABLE)


class Gate(StrEnum):
    MEMORY = "memory"
    KV = "kv"
    ISOLATION = "isolation"
    LOAD_TEST = "load_test"
    ENGINE_SETTINGS = "engine_settings"

    @property
    def title(self) -> str:
        return _TITLES[self]

    @property
    def runbook_slug(self) -> str:
        return _RUNBOOKS[self]


_TITLES = {
    Gate.MEMORY: "Memory ledger, per card",
    Gate.KV: "KV reservation",
    Gate.ISOLATION: "Isolation",
    Gate.LOAD_TEST: "Combined load test",
    Gate.ENGINE_SETTINGS: "Engine memory settings",
}
_RUNBOOKS = {
    Gate.MEMORY: "before-adding-a-model",
    Gate.KV: "kv-reservation",
    Gate.ISOLATION: "choosing-isolation",
    Gate.LOAD_TEST: "before-adding-a-model",
    Gate.ENGINE_SETTINGS: "engine-memory-settings",
}


@dataclass(frozen=True)
class GateOutcome:
    gate: Gate
    status: GateStatus
    summary: Reason | str  # one sentence, with the deciding numbers
    reasons: tuple[Reason | str, ...] = ()  # every failed check, each in numbers
    numbers: dict[str, Any] = field(default_factory=dict)  # JSON-safe figures for display
    evidence: dict[str, Any] = field(default_factory=dict)  # where the figures came from
    runbook_slug: str = ""

    def __post_init__(self) -> None:
        if not self.runbook_slug:
            object.__setattr__(self, "runbook_slug", self.gate.runbook_slug)


@dataclass(frozen=True)
class Checked:
    """One run of every gate: the outcomes, and the cards the solver chose (inventory's Gpu
    rows; empty when it did not choose)."""

    outcomes: list[GateOutcome]
    solver_gpus: list[Any]
