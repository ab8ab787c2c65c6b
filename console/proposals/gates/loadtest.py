"""Gate 4, the combined load test (pure).

Passes only when one test drove **every** model on the target cards at once, at the real
traffic ratio, and **both** were green: each model's P99 end-to-end latency within its SLO, and
each target card's memory peak within its bound (usable memory minus the headroom). A
single-model result counts for nothing and is rejected with that reason.

Checks, each reported in numbers:

- coverage: every co-located model is in the result (names match exactly, or by the part
  after the last "/", ignoring case);
- at once: results that carry their time windows (vLLM JSON) must all overlap;
- traffic ratio: where the real rates are known (engine history, or the proposal's expected
  rate for a new model), each model's share of the test's requests is within
  ``RATIO_TOLERANCE`` (relative) of its real share;
- latency and memory, as above.

It also says which card reached its capacity or latency bound first: the card with the highest
ratio of measured to bound, memory peak / bound or P99 / SLO of a model on it. That card is
where the next incident will happen.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from console.proposals.gates import Gate, GateOutcome, GateStatus
from console.proposals.loadtests import LoadTestRun, ModelRun
from inventory.analytics.units import format_gib

RATIO_TOLERANCE = 0.25


@dataclass(frozen=True)
class Colocated:
    name: str
    slo_ms: int | None
    cards: tuple[str, ...]  # the target cards it runs on
    real_rate: float | None  # requests/s in production (or expected, for the new model)


@dataclass(frozen=True)
class LoadTestRequest:
    models: tuple[Colocated, ...]  # everyone on the target cards, the proposed model included
    card_bounds: dict[str, int]  # target card -> usable bytes minus headroom
    run: LoadTestRun | None
    run_label: str = ""  # who attached it, when


def _key(name: str) -> str:
    return name.rsplit("/", 1)[-1].strip().lower()


def _match(models: tuple[Colocated, ...], run: LoadTestRun) -> dict[str, ModelRun]:
    by_exact = {result.model.lower(): result for result in run.models}
    by_base = {_key(result.model): result for result in run.models}
    matched = {}
    for model in models:
        found = by_exact.get(model.name.lower()) or by_base.get(_key(model.name))
        if found is not None:
            matched[model.name] = found
    return matched


def _overlap_reason(results: dict[str, ModelRun]) -> str:
    windows = {
        name: (dt.datetime.fromisoformat(r.started_at), dt.datetime.fromisoformat(r.ended_at))
        for name, r in results.items()
        if r.started_at and r.ended_at
    }
    if len(windows) < 2:
        return ""
    latest_start = max(start for start, _ in windows.values())
    earliest_end = min(end for _, end in windows.values())
    if latest_start < earliest_end:
        return ""
    spans = "; ".join(
        f"{name} {start:%H:%M:%S}-{end:%H:%M:%S}" for name, (start, end) in sorted(windows.items())
    )
    return f"The results were not run at once: their time windows do not overlap ({spans})."


def _ratio_check(
    models: tuple[Colocated, ...], results: dict[str, ModelRun]
) -> tuple[list[str], list[dict], list[str]]:
    known = [m for m in models if m.real_rate and m.name in results and results[m.name].rate]
    unverified = [m.name for m in models if m not in known]
    if len(known) < 2:
        return [], [], [m.name for m in models]
    real_total = sum(m.real_rate for m in known)
    test_total = sum(results[m.name].rate for m in known)
    rows, reasons = [], []
    for model in known:
        real = model.real_rate / real_total
        tested = results[model.name].rate / test_total
        rows.append({"model": model.name, "real_share": real, "test_share": tested})
        if abs(tested / real - 1) > RATIO_TOLERANCE:
            reasons.append(
                f"{model.name} got {tested:.0%} of the test's requests but {real:.0%} of the "
                f"real traffic (more than {RATIO_TOLERANCE:.0%} off): not the real ratio."
            )
    return reasons, rows, unverified


def evaluate_load_test(request: LoadTestRequest) -> GateOutcome:
    names = [m.name for m in request.models]
    numbers: dict = {"colocated": names, "run": request.run_label}
    if request.run is None:
        reason = f"No combined load test attached: drive {', '.join(names)} at once."
        return GateOutcome(Gate.LOAD_TEST, GateStatus.FAIL, reason, (reason,), numbers)

    results = _match(request.models, request.run)
    tested = [result.model for result in request.run.models]
    numbers["tested"] = tested
    if len(request.models) > 1 and len(request.run.models) == 1:
        reason = (
            f"Single-model result: only {tested[0]} was tested, and a single-model test counts "
            f"for nothing; drive all {len(names)} co-located models ({', '.join(names)}) at once."
        )
        return GateOutcome(Gate.LOAD_TEST, GateStatus.FAIL, reason, (reason,), numbers)

    reasons: list[str] = []
    missing = [name for name in names if name not in results]
    if missing:
        reasons.append(f"Not in the combined test: {', '.join(missing)}.")
    overlap = _overlap_reason(results)
    if overlap:
        reasons.append(overlap)
    ratio_reasons, ratio_rows, unverified = _ratio_check(request.models, results)
    reasons += ratio_reasons
    numbers["ratio"] = ratio_rows
    numbers["ratio_unverified"] = unverified

    model_rows = []
    bound_by_card: dict[str, list[tuple[float, str]]] = {}
    for model in request.models:
        result = results.get(model.name)
        row = {"model": model.name, "slo_ms": model.slo_ms, "cards": list(model.cards)}
        if result is not None:
            row |= {
                "p99_latency_ms": result.p99_latency_ms,
                "p99_ttft_ms": result.p99_ttft_ms,
                "rate": result.rate,
                "completed": result.completed,
                "failed": result.failed,
                "source": result.source,
            }
        model_rows.append(row)
        if result is None:
            continue
        if result.p99_latency_ms is None:
            reasons.append(
                f"{result.source} has no P99 end-to-end latency for {model.name} (run the "
                "benchmark with --percentile-metrics including e2el)."
            )
        elif model.slo_ms is None:
            reasons.append(f"{model.name} has no P99 latency SLO to test against.")
        else:
            ratio = result.p99_latency_ms / model.slo_ms
            row["latency_ratio"] = ratio
            if ratio > 1:
                reasons.append(
                    f"{model.name}: P99 {result.p99_latency_ms:.0f} ms is over its "
                    f"{model.slo_ms} ms SLO."
                )
            detail = (
                f"latency: {model.name} P99 {result.p99_latency_ms:.0f} ms of {model.slo_ms} ms SLO"
            )
            for card in model.cards:
                bound_by_card.setdefault(card, []).append((ratio, detail))
    numbers["models"] = model_rows

    card_rows = []
    for card, bound in request.card_bounds.items():
        peak = request.run.card_peaks.get(card)
        row = {"card": card, "bound_bytes": bound, "peak_bytes": peak}
        card_rows.append(row)
        if peak is None:
            reasons.append(f"No memory peak recorded for {card}.")
            continue
        ratio = peak / bound if bound > 0 else float("inf")
        row["memory_ratio"] = ratio
        if ratio > 1:
            reasons.append(
                f"{card}: memory peaked at {format_gib(peak)}, over its bound of "
                f"{format_gib(bound)} (usable minus headroom)."
            )
        detail = f"memory: peak {format_gib(peak)} of {format_gib(bound)}"
        bound_by_card.setdefault(card, []).append((ratio, detail))
    numbers["cards"] = card_rows

    first = ""
    if bound_by_card:
        card, (ratio, detail) = max(
            ((card, max(entries)) for card, entries in bound_by_card.items()),
            key=lambda item: item[1][0],
        )
        verb = "reached its bound first" if ratio >= 1 else "came closest to its bound"
        first = f"{card} {verb}: {detail} ({ratio:.0%})."
        numbers["first_bound"] = {"card": card, "ratio": ratio, "detail": detail}

    if reasons:
        summary = reasons[0] + (f" {first}" if first else "")
        return GateOutcome(Gate.LOAD_TEST, GateStatus.FAIL, summary, tuple(reasons), numbers)
    summary = f"All {len(names)} co-located models green at once, latency and memory. {first}"
    return GateOutcome(Gate.LOAD_TEST, GateStatus.PASS, summary, (), numbers)
