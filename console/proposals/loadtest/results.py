"""What a combined load test measured, in figures (pure: no Django).

From the runner's request records: per model the rate achieved, P50/P95/P99 of time to first
token, inter-token and end-to-end latency, errors by code, and a series over time for the
result page. From the console's telemetry over the test's window: per card its memory peak.
Then, in time order, the first bound reached: a card's memory above its bound (capacity minus
headroom) or a model's P99 over its SLO, with the moment and the load at that moment.

The verdict counts the hold phase (and any past-the-bound phase for the first bound only): the
ramp is not the busy-hour ratio yet.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass

from console.proposals.gates.loadtest_report import LoadTestRun, ModelRun
from console.proposals.loadtest.plan import LoadTestPlan, Phase
from console.proposals.loadtest.runner import RequestRecord, RunOutcome
from inventory.analytics.stats import percentile

SERIES_STEP_S = 5.0
# A bucket with fewer completions says little about a P99.
MIN_BUCKET_REQUESTS = 5


@dataclass(frozen=True)
class CardSample:
    card: str
    at: float  # epoch seconds
    used_bytes: int


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).isoformat(timespec="seconds")


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    return {f"p{q}": round(percentile(values, q) * 1000, 2) for q in (50, 95, 99)}


def _in_verdict(plan: LoadTestPlan, record: RequestRecord) -> bool:
    return plan.phase_at(record.sent_s) is Phase.HOLD


def model_summaries(plan: LoadTestPlan, outcome: RunOutcome) -> list[dict]:
    model_of = {t.deployment: t.name for t in plan.targets}
    slo = {t.name: t.slo_ms for t in plan.targets}
    by_model: dict[str, list[RequestRecord]] = {name: [] for name in slo}
    for record in outcome.records:
        if _in_verdict(plan, record):
            by_model[model_of[record.deployment]].append(record)
    hold_s = plan.phases.hold_s
    ratio = plan.ratio()
    offered: dict[str, float] = {}
    for target in plan.targets:  # the hold offers each target its busy-hour rate
        offered[target.name] = offered.get(target.name, 0.0) + target.rate_rps
    rows = []
    for name, records in by_model.items():
        done = [r for r in records if not r.error]
        errors = Counter(r.error for r in records if r.error)
        rows.append(
            {
                "model": name,
                "slo_ms": slo[name],
                "target_share": ratio[name],
                "sent": len(records),
                "completed": len(done),
                "failed": sum(errors.values()),
                "errors": dict(errors),
                "error_detail": next((r.detail for r in records if r.error and r.detail), ""),
                "rate_rps": round(len(records) / hold_s, 4) if hold_s else None,
                "offered_rps": round(offered[name], 4),
                "ttft_ms": _percentiles([r.ttft_s for r in done]),
                "e2e_ms": _percentiles([r.e2e_s for r in done]),
                "itl_ms": _percentiles([r.itl_s for r in done if r.itl_s is not None]),
            }
        )
    return rows


def latency_series(plan: LoadTestPlan, outcome: RunOutcome) -> dict[str, list[dict]]:
    """Per model and step of the whole test: completions, P50 and P99 end to end (ms)."""
    model_of = {t.deployment: t.name for t in plan.targets}
    buckets: dict[tuple[str, int], list[float]] = {}
    for record in outcome.records:
        if record.error or record.e2e_s is None:
            continue
        step = int(record.sent_s // SERIES_STEP_S)
        buckets.setdefault((model_of[record.deployment], step), []).append(record.e2e_s)
    series: dict[str, list[dict]] = {t.name: [] for t in plan.targets}
    for (model, step), values in sorted(buckets.items()):
        series[model].append(
            {
                "t_s": step * SERIES_STEP_S,
                "count": len(values),
                "p50_ms": round(percentile(values, 50) * 1000, 2),
                "p99_ms": round(percentile(values, 99) * 1000, 2),
            }
        )
    return series


def card_peaks(samples: list[CardSample]) -> dict[str, int]:
    peaks: dict[str, int] = {}
    for sample in samples:
        peaks[sample.card] = max(peaks.get(sample.card, 0), sample.used_bytes)
    return peaks


def _load_at(plan: LoadTestPlan, t: float) -> dict[str, float]:
    factor = plan.load_factor(t)
    rates: dict[str, float] = {}
    for target in plan.targets:
        rates[target.name] = rates.get(target.name, 0.0) + round(target.rate_rps * factor, 3)
    return rates


def first_bound(
    plan: LoadTestPlan,
    started_at: float,
    series: dict[str, list[dict]],
    samples: list[CardSample],
    bounds: dict[str, int],
) -> dict | None:
    """The first bound reached, in time order: a card over its memory bound, or a model's P99
    over its SLO in a step of the series (ramp and past-the-bound included)."""
    crossings = []
    for sample in samples:
        bound = bounds.get(sample.card)
        if bound is not None and sample.used_bytes > bound:
            crossings.append(
                (
                    sample.at - started_at,
                    {
                        "kind": "memory",
                        "card": sample.card,
                        "peak_bytes": sample.used_bytes,
                        "bound_bytes": bound,
                    },
                )
            )
    slo = {t.name: t.slo_ms for t in plan.targets}
    cards = {t.name: list(t.cards) for t in plan.targets}
    for model, points in series.items():
        for point in points:
            if (
                slo[model]
                and point["count"] >= MIN_BUCKET_REQUESTS
                and point["p99_ms"] > slo[model]
            ):
                crossings.append(
                    (
                        point["t_s"] + SERIES_STEP_S,
                        {
                            "kind": "latency",
                            "model": model,
                            "cards": cards[model],
                            "p99_ms": point["p99_ms"],
                            "slo_ms": slo[model],
                        },
                    )
                )
                break
    if not crossings:
        return None
    t, what = min(crossings, key=lambda item: item[0])
    t = max(0.0, t)
    return what | {
        "t_s": round(t, 1),
        "at": _iso(started_at + t),
        "phase": str(plan.phase_at(t)),
        "load_rps": _load_at(plan, t),
    }


def as_run(
    plan: LoadTestPlan, outcome: RunOutcome, summaries: list[dict], peaks: dict
) -> LoadTestRun:
    """The measured test in the shape gate 4 reads for every result, imported or measured."""
    hold_start = outcome.started_at + plan.phases.ramp_s
    hold_end = hold_start + plan.phases.hold_s
    models = tuple(
        ModelRun(
            model=row["model"],
            source="console runner",
            p99_latency_ms=row["e2e_ms"]["p99"],
            p99_ttft_ms=row["ttft_ms"]["p99"],
            # What the test offered, as vLLM's request_rate is: an open-loop Poisson test's
            # count in a short hold strays from it by chance alone (about 1/sqrt(n)).
            request_rate=row["offered_rps"],
            throughput_rps=round(row["completed"] / plan.phases.hold_s, 4)
            if plan.phases.hold_s
            else None,
            completed=row["completed"],
            failed=row["failed"],
            started_at=_iso(hold_start),
            ended_at=_iso(hold_end),
            duration_s=plan.phases.hold_s,
        )
        for row in summaries
    )
    return LoadTestRun("measured", models, peaks)
