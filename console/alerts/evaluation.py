"""The life of an alert, decided from what crossed a rule's threshold this cycle.

    nothing ──crossing──► pending ──held for `for`──► firing ──clear for the hysteresis──► resolved
                             └──cleared before `for`──► dropped (it never fired, nobody is told)

A rule with no `for` fires at its first crossing. Pure: the evaluator hands in the open alerts
and this cycle's crossings and writes back what `step` decides, so a cycle run twice on the
same data decides nothing the second time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class State(StrEnum):
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True)
class Crossing:
    """One thing (a card, a deployment, a host, the fleet) over a rule's threshold now."""

    fingerprint: str
    labels: Mapping[str, str]
    values: Mapping[str, float | int | str | None]
    host_id: int | None = None
    gpu_id: int | None = None
    deployment_id: int | None = None
    # For rules scoped to a host label; not part of the alert's own labels.
    host_labels: Mapping[str, str] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class OpenAlert:
    fingerprint: str
    state: State
    started_at: dt.datetime
    last_crossed_at: dt.datetime


@dataclass(frozen=True)
class Timing:
    for_s: float
    resolve_after_s: float


@dataclass
class Decisions:
    start_pending: list[Crossing] = field(default_factory=list)
    start_firing: list[Crossing] = field(default_factory=list)
    fire: list[Crossing] = field(default_factory=list)  # pending held long enough
    still: list[Crossing] = field(default_factory=list)  # open and still crossing
    resolve: list[str] = field(default_factory=list)  # fingerprints
    drop: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(
            self.start_pending or self.start_firing or self.fire or self.resolve or self.drop
        )


def step(
    timing: Timing,
    open_alerts: Mapping[str, OpenAlert],
    crossings: Mapping[str, Crossing],
    now: dt.datetime,
) -> Decisions:
    decisions = Decisions()
    for fingerprint, crossing in crossings.items():
        alert = open_alerts.get(fingerprint)
        if alert is None:
            target = decisions.start_firing if timing.for_s <= 0 else decisions.start_pending
            target.append(crossing)
        elif alert.state == State.PENDING and held(alert, timing, now):
            decisions.fire.append(crossing)
        else:
            decisions.still.append(crossing)
    for fingerprint, alert in open_alerts.items():
        if fingerprint in crossings:
            continue
        if alert.state == State.PENDING:
            decisions.drop.append(fingerprint)
        elif (now - alert.last_crossed_at).total_seconds() >= timing.resolve_after_s:
            decisions.resolve.append(fingerprint)
    return decisions


def held(alert: OpenAlert, timing: Timing, now: dt.datetime) -> bool:
    return (now - alert.started_at).total_seconds() >= timing.for_s


def repeat_due(
    last_notified_at: dt.datetime | None, repeat_interval_s: float, now: dt.datetime
) -> bool:
    """A firing alert nobody acknowledged is told again every repeat interval (0: never)."""
    if last_notified_at is None:
        return True
    if repeat_interval_s <= 0:
        return False
    return (now - last_notified_at).total_seconds() >= repeat_interval_s
