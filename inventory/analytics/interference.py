"""Interference: does a deployment's tail latency rise when its co-tenants are busy?

Each latency sample (``(epoch s, seconds)``: per-request latencies, or per-interval P99
figures from a rollup) is put in one group by the co-tenants' load at that moment, read with
:func:`inventory.analytics.series.as_of` (latest reading no older than ``max_age_s``):

- busy: at least one co-tenant's load is at or above ``busy_threshold``;
- idle: every co-tenant has a fresh reading and all are below it;
- otherwise unknown, and left out.

Load is whatever busy indicator the caller has, on one scale for all co-tenants (running
requests, or SM utilization in [0, 1]). The tail of each group is its ``tail_pct`` percentile
(default P99; over per-interval P99 figures that is the P99 of the interval P99s).

Flag (``tail_rises``) when both groups have at least ``min_samples`` samples and busy tail /
idle tail >= ``ratio_threshold`` (default 1.25: a quarter slower at the tail is what users
notice and more than interval-to-interval noise). Too few samples in either group gives
``insufficient_data`` rather than a reassuring "no effect".

Two days of a shared host's minutes are thousands of samples a deployment, each looked up in
every co-tenant's load: the grouping runs over numpy arrays, and the tails are read off the
sorted groups with the percentile of :mod:`inventory.analytics.stats`, so each figure is the
same number to the last bit as a sample-by-sample loop gives.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from inventory.analytics.reasons import Reason, gettext_noop, register
from inventory.analytics.series import Sample, as_of
from inventory.analytics.stats import sorted_array_percentile

# Samples as pairs, or their (n, 2) array: what a query hands over without a tuple a minute.
Samples = Sequence[Sample] | np.ndarray

MESSAGES = register(
    {
        "interference.insufficient": gettext_noop(
            "{busy} busy / {idle} idle samples, need {min_samples} in each group to compare "
            "the {label}"
        ),
        "interference.compared": gettext_noop(
            "{label} {busy_tail:ms} with co-tenants busy vs {idle_tail:ms} idle (x{ratio:.2f}, "
            "{busy} busy / {idle} idle samples): {outcome}"
        ),
        "interference.tail_rises": gettext_noop("tail rises with co-tenant load"),
        "interference.below_flag": gettext_noop("below the x{threshold:g} flag"),
    }
)


class InterferenceVerdict(StrEnum):
    TAIL_RISES = "tail_rises"
    NO_EFFECT = "no_effect"
    INSUFFICIENT_DATA = "insufficient_data"


@dataclass(frozen=True)
class InterferenceReport:
    deployment: str
    cotenants: tuple[str, ...]
    tail_pct: float
    busy_samples: int
    idle_samples: int
    unknown_samples: int
    busy_tail_s: float | None
    idle_tail_s: float | None
    ratio: float | None
    verdict: InterferenceVerdict
    explanation: Reason  # read with inventory.analytics.reasons.render

    @property
    def flagged(self) -> bool:
        return self.verdict is InterferenceVerdict.TAIL_RISES


def tail_vs_cotenant_load(
    deployment: str,
    latencies: Samples,
    cotenant_load: Mapping[str, Samples],
    *,
    busy_threshold: float,
    tail_pct: float = 99.0,
    ratio_threshold: float = 1.25,
    min_samples: int = 20,
    max_age_s: float = 60.0,
) -> InterferenceReport:
    """``latencies`` and each co-tenant's load are ``(epoch s, value)`` samples: a sequence of
    pairs, or the ``(n, 2)`` array of them."""
    samples = _as_samples(latencies)
    at, latency = samples[:, 0], samples[:, 1]
    any_busy = np.zeros(len(at), dtype=bool)
    all_fresh = np.full(len(at), bool(cotenant_load))
    for load in cotenant_load.values():
        value, fresh = as_of(_as_samples(load), at, max_age_s)
        any_busy |= fresh & (value >= busy_threshold)
        all_fresh &= fresh
    busy = np.sort(latency[any_busy])
    idle = np.sort(latency[~any_busy & all_fresh])
    unknown = len(at) - len(busy) - len(idle)

    busy_tail = sorted_array_percentile(busy, tail_pct) if len(busy) else None
    idle_tail = sorted_array_percentile(idle, tail_pct) if len(idle) else None
    ratio = None
    if busy_tail is not None and idle_tail is not None:
        ratio = busy_tail / idle_tail if idle_tail > 0 else float("inf")
    label = f"P{tail_pct:g}"
    counts = {"busy": len(busy), "idle": len(idle)}
    if len(busy) < min_samples or len(idle) < min_samples or ratio is None:
        verdict = InterferenceVerdict.INSUFFICIENT_DATA
        explanation = Reason(
            "interference.insufficient", {**counts, "min_samples": min_samples, "label": label}
        )
    else:
        assert busy_tail is not None and idle_tail is not None
        verdict = (
            InterferenceVerdict.TAIL_RISES
            if ratio >= ratio_threshold
            else InterferenceVerdict.NO_EFFECT
        )
        outcome = (
            Reason("interference.tail_rises")
            if verdict is InterferenceVerdict.TAIL_RISES
            else Reason("interference.below_flag", {"threshold": ratio_threshold})
        )
        explanation = Reason(
            "interference.compared",
            {
                "label": label,
                "busy_tail": busy_tail,
                "idle_tail": idle_tail,
                "ratio": ratio,
                **counts,
                "outcome": outcome,
            },
        )
    return InterferenceReport(
        deployment=deployment,
        cotenants=tuple(sorted(cotenant_load)),
        tail_pct=tail_pct,
        busy_samples=len(busy),
        idle_samples=len(idle),
        unknown_samples=unknown,
        busy_tail_s=busy_tail,
        idle_tail_s=idle_tail,
        ratio=ratio,
        verdict=verdict,
        explanation=explanation,
    )


def _as_samples(samples: Samples) -> np.ndarray:
    return np.asarray(samples, dtype=float).reshape(-1, 2)


def cotenants_by_deployment(placement: Mapping[str, Iterable[str]]) -> dict[str, tuple[str, ...]]:
    """From card -> deployments on it, each deployment's co-tenants on any card it shares."""
    cotenants: dict[str, set[str]] = {}
    for deployments in placement.values():
        on_card = set(deployments)
        for deployment in on_card:
            cotenants.setdefault(deployment, set()).update(on_card - {deployment})
    return {deployment: tuple(sorted(others)) for deployment, others in cotenants.items()}


def interference_by_deployment(
    latencies: Mapping[str, Samples],
    load: Mapping[str, Samples],
    placement: Mapping[str, Iterable[str]],
    *,
    busy_threshold: float,
    tail_pct: float = 99.0,
    ratio_threshold: float = 1.25,
    min_samples: int = 20,
    max_age_s: float = 60.0,
) -> tuple[InterferenceReport, ...]:
    """A report for every deployment with latencies and at least one co-tenant."""
    reports = []
    for deployment, others in sorted(cotenants_by_deployment(placement).items()):
        if deployment not in latencies or not others:
            continue
        reports.append(
            tail_vs_cotenant_load(
                deployment,
                latencies[deployment],
                {other: load.get(other, ()) for other in others},
                busy_threshold=busy_threshold,
                tail_pct=tail_pct,
                ratio_threshold=ratio_threshold,
                min_samples=min_samples,
                max_age_s=max_age_s,
            )
        )
    return tuple(reports)
