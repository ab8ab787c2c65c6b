"""Gate 4, the combined load test (pure).

Passes only a result that drove **every** model on the target cards at once, at the real
traffic ratio, on the placement being proposed, with **both** green: each model's P99
end-to-end latency within its SLO, and each target card's memory peak within its bound (usable
memory minus headroom). The card peaks always come from the console's own telemetry over the
test's window, never from whoever uploaded the result: a result whose window has no telemetry
fails, and figures typed in beside an import that disagree with the measured ones fail too.

Checks, each failed one a reason code with its parameters (``MESSAGES``,
inventory.analytics.reasons):

- coverage: every co-located model is in the result (names match exactly, or by the part
  after the last "/", ignoring case); a single-model result counts for nothing;
- at once: results that carry their time windows must all overlap;
- traffic ratio: each model's share of the test's requests within ``RATIO_TOLERANCE``
  (relative) of its real share; a ratio that cannot be checked (a rate unknown) fails;
- placement: a result the console measured must have run on the proposed cards with the
  proposed isolation;
- errors: no more than ``MAX_FAILED_SHARE`` of a model's requests failed;
- latency and memory, as above.

It also says which bound was reached first: in time order where the console measured it (the
runner's series and the telemetry samples), else the card closest to its bound.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from console.proposals.gates import Gate, GateOutcome, GateStatus, then
from console.proposals.gates.loadtest_report import LoadTestRun, ModelRun
from inventory.analytics.reasons import Reason, as_stored, gettext_noop, register, render

RATIO_TOLERANCE = 0.25
MAX_FAILED_SHARE = 0.01
# Peaks typed in beside an import may differ from the telemetry by sampling; not by more.
DECLARED_PEAK_TOLERANCE = 0.05

MESSAGES = register(
    {
        "gate.load_test.no_result": gettext_noop("No combined load test: drive {models} at once."),
        "gate.load_test.run_not_finished": gettext_noop(
            "The combined test did not finish ({status}): it counts for nothing."
        ),
        "gate.load_test.single_model": gettext_noop(
            "Single-model result: only {tested} was tested, and a single-model test "
            "counts for nothing; drive all {count} co-located models ({models}) at once."
        ),
        "gate.load_test.missing_models": gettext_noop("Not in the combined test: {models}."),
        "gate.load_test.not_at_once": gettext_noop(
            "The results were not run at once: their time windows do not overlap ({spans})."
        ),
        "gate.load_test.ratio_off": gettext_noop(
            "{model} got {test_share:.0%} of the test's requests but {real_share:.0%} of "
            "the real traffic (more than {tolerance:.0%} off): not the real ratio."
        ),
        "gate.load_test.ratio_unverifiable": gettext_noop(
            "The traffic ratio cannot be checked: no real or tested rate for {models}."
        ),
        "gate.load_test.placement_differs": gettext_noop(
            "The test ran on {tested}, the proposal places the model on "
            "{proposed}: not the placement proposed."
        ),
        "gate.load_test.isolation_differs": gettext_noop(
            "{model} ran with {tested} isolation in the test, {proposed} is proposed."
        ),
        "gate.load_test.requests_failed": gettext_noop(
            "{model}: {failed} of {sent} requests failed ({errors})."
        ),
        "gate.load_test.no_p99": gettext_noop(
            "{source} has no P99 end-to-end latency for {model} (run the benchmark with "
            "--percentile-metrics including e2el)."
        ),
        "gate.load_test.no_slo": gettext_noop("{model} has no P99 latency SLO to test against."),
        "gate.load_test.p99_over_slo": gettext_noop(
            "{model}: P99 {p99_ms:.0f} ms is over its {slo_ms} ms SLO."
        ),
        "gate.load_test.no_window": gettext_noop(
            "{source} says nothing of when it ran, so its card peaks cannot be checked "
            "against telemetry."
        ),
        "gate.load_test.no_telemetry": gettext_noop(
            "No telemetry of {card} from {start} to {end}: the test's memory cannot be checked."
        ),
        "gate.load_test.declared_peak_mismatch": gettext_noop(
            "{card}: the peak given with the result, {declared_bytes:gib}, is not the "
            "{measured_bytes:gib} the console measured over the test's window."
        ),
        "gate.load_test.card_over_bound": gettext_noop(
            "{card}: memory peaked at {peak_bytes:gib}, over its bound of {bound_bytes:gib} "
            "(usable minus headroom)."
        ),
        "gate.load_test.all_green": gettext_noop(
            "All {count} co-located models green at once, latency and memory."
        ),
        # Which bound the test reached first (``first_bound``).
        "gate.load_test.memory_over": gettext_noop("memory: {peak:gib} over {bound:gib}"),
        "gate.load_test.memory_of": gettext_noop("memory: peak {peak:gib} of {bound:gib}"),
        "gate.load_test.latency_of": gettext_noop(
            "latency: {model} P99 {p99_ms:.0f} ms of {slo_ms} ms"
        ),
        "gate.load_test.latency_of_slo": gettext_noop(
            "latency: {model} P99 {p99_ms:.0f} ms of {slo_ms} ms SLO"
        ),
        "gate.load_test.detail_at": gettext_noop("{detail} at {at:time}"),
        "gate.load_test.detail_at_load": gettext_noop("{detail} at {at:time} ({load})"),
        "gate.load_test.first_in_time": gettext_noop("{card} reached its bound first: {detail}."),
        "gate.load_test.first_by_ratio": gettext_noop(
            "{card} reached its bound first: {detail} ({ratio:.0%})."
        ),
        "gate.load_test.closest_by_ratio": gettext_noop(
            "{card} came closest to its bound: {detail} ({ratio:.0%})."
        ),
        # Who ran or attached the result (``run_label``), and where each figure came from.
        "gate.load_test.run_by": gettext_noop("run by {user} at {at:time} ({files:comma})"),
        "gate.load_test.attached_by": gettext_noop(
            "attached by {user} at {at:time} ({files:comma})"
        ),
        "gate.load_test.source.runner": gettext_noop("the console's runner"),
        "gate.load_test.source.imported": gettext_noop("imported: {format}"),
        "gate.load_test.source.runner_hold": gettext_noop("the console's runner (hold phase)"),
        "gate.load_test.source.imported_files": gettext_noop("the imported files"),
        "gate.load_test.source.telemetry": gettext_noop("console telemetry"),
        "gate.load_test.source.telemetry_window": gettext_noop(
            "the console's telemetry samples from {start} to {end}"
        ),
        "gate.load_test.source.no_window": gettext_noop("none: the result has no time window"),
        "gate.load_test.source.declared": gettext_noop("typed in beside the import; checked only"),
        "gate.load_test.source.real_rates": gettext_noop(
            "engine history of each deployment, or the proposal's expected rate"
        ),
    }
)


@dataclass(frozen=True)
class Colocated:
    name: str
    slo_ms: int | None
    cards: tuple[str, ...]  # the target cards it runs on
    real_rate: float | None  # requests/s in production (or expected, for the new model)
    isolation: str = ""  # as proposed (the proposed model) or as deployed (co-tenants)


@dataclass(frozen=True)
class Telemetry:
    """The console's samples of the target cards over the result's window."""

    window: tuple[str, str] | None  # ISO start and end; None when the result has none
    card_peaks: dict[str, int] = field(default_factory=dict)  # cards with samples only
    first_over_bound: dict | None = None  # the first sample above its bound, in time order


@dataclass(frozen=True)
class LoadTestRequest:
    models: tuple[Colocated, ...]  # everyone on the target cards, the proposed model included
    card_bounds: dict[str, int]  # target card -> usable bytes minus headroom
    run: LoadTestRun | None
    run_label: Reason | None = None  # who attached or ran it, when (run_by, attached_by)
    telemetry: Telemetry | None = None
    # Console runs only: what the test ran on ({"cards": [...], "isolation": {model: mode}}),
    # how it ended, and the first bound it found in time order.
    tested_placement: dict | None = None
    run_status: str = ""
    measured_first_bound: dict | None = None
    sent: dict[str, int] = field(default_factory=dict)  # console runs: requests per model
    errors: dict[str, dict[str, int]] = field(default_factory=dict)


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


def _overlap(results: dict[str, ModelRun]) -> dict | None:
    windows = {
        name: (dt.datetime.fromisoformat(r.started_at), dt.datetime.fromisoformat(r.ended_at))
        for name, r in results.items()
        if r.started_at and r.ended_at
    }
    if len(windows) < 2:
        return None
    latest_start = max(start for start, _ in windows.values())
    earliest_end = min(end for _, end in windows.values())
    if latest_start < earliest_end:
        return None
    spans = "; ".join(
        f"{name} {start:%H:%M:%S}-{end:%H:%M:%S}" for name, (start, end) in sorted(windows.items())
    )
    return {"spans": spans}


class _Reasons:
    def __init__(self) -> None:
        self.found: list[Reason] = []

    def add(self, code: str, **params) -> None:
        self.found.append(Reason(f"gate.load_test.{code}", params))


def _ratio(models, results, reasons: _Reasons) -> list[dict]:
    unknown = [m.name for m in models if not m.real_rate or not results[m.name].rate]
    if unknown:
        reasons.add("ratio_unverifiable", models=", ".join(unknown))
        return []
    real_total = sum(m.real_rate for m in models)
    test_total = sum(results[m.name].rate for m in models)
    rows = []
    for model in models:
        real = model.real_rate / real_total
        tested = results[model.name].rate / test_total
        rows.append({"model": model.name, "real_share": real, "test_share": tested})
        if abs(tested / real - 1) > RATIO_TOLERANCE:
            reasons.add(
                "ratio_off",
                model=model.name,
                test_share=tested,
                real_share=real,
                tolerance=RATIO_TOLERANCE,
            )
    return rows


def _placement(request: LoadTestRequest, reasons: _Reasons) -> None:
    tested = request.tested_placement
    if tested is None:
        return
    proposed = sorted(request.card_bounds)
    tested_cards = sorted(tested.get("cards", []))
    if tested_cards != proposed:
        reasons.add(
            "placement_differs", tested=", ".join(tested_cards), proposed=", ".join(proposed)
        )
    for model in request.models:
        mode = tested.get("isolation", {}).get(model.name)
        if model.isolation and mode and mode != model.isolation:
            reasons.add(
                "isolation_differs", model=model.name, tested=mode, proposed=model.isolation
            )


def _memory(request: LoadTestRequest, reasons: _Reasons, bound_by_card: dict) -> list[dict]:
    run = request.run
    telemetry = request.telemetry or Telemetry(None)
    rows = []
    if telemetry.window is None:
        reasons.add("no_window", source=", ".join(sorted({m.source for m in run.models})))
    for card, bound in request.card_bounds.items():
        declared = None if run.source_format == "measured" else run.card_peaks.get(card)
        measured = telemetry.card_peaks.get(card)
        row = {
            "card": card,
            "bound_bytes": bound,
            "peak_bytes": measured,
            "declared_bytes": declared,
            "peak_source": _source("telemetry") if measured is not None else "",
        }
        rows.append(row)
        if telemetry.window is not None and measured is None:
            start, end = telemetry.window
            reasons.add("no_telemetry", card=card, start=start, end=end)
        if declared is not None and measured is not None:
            off = abs(declared - measured) / max(1, measured)
            if off > DECLARED_PEAK_TOLERANCE:
                reasons.add(
                    "declared_peak_mismatch",
                    card=card,
                    declared_bytes=declared,
                    measured_bytes=measured,
                )
        if measured is None:
            continue
        ratio = measured / bound if bound > 0 else float("inf")
        row["memory_ratio"] = ratio
        if ratio > 1:
            reasons.add("card_over_bound", card=card, peak_bytes=measured, bound_bytes=bound)
        detail = Reason("gate.load_test.memory_of", {"peak": measured, "bound": bound})
        bound_by_card.setdefault(card, []).append((ratio, detail))
    return rows


def _first_bound(request: LoadTestRequest, bound_by_card: dict) -> dict | None:
    """In time order where the console measured the test; else the closest to its bound."""
    timed = [
        bound
        for bound in (
            request.measured_first_bound,
            (request.telemetry.first_over_bound if request.telemetry else None),
        )
        if bound
    ]
    if timed:
        first = min(timed, key=lambda b: b["at"])
        where = first.get("card") or ", ".join(first.get("cards", []))
        if first["kind"] == "memory":
            detail = Reason(
                "gate.load_test.memory_over",
                {"peak": first["peak_bytes"], "bound": first["bound_bytes"]},
            )
        else:
            detail = Reason(
                "gate.load_test.latency_of",
                {"model": first["model"], "p99_ms": first["p99_ms"], "slo_ms": first["slo_ms"]},
            )
        load = first.get("load_rps")
        when = (
            Reason(
                "gate.load_test.detail_at_load",
                {
                    "detail": detail,
                    "at": first["at"],
                    "load": ", ".join(f"{m} {r:g}/s" for m, r in load.items()),
                },
            )
            if load
            else Reason("gate.load_test.detail_at", {"detail": detail, "at": first["at"]})
        )
        return {
            **first,
            "card": where,
            "detail": when.to_json(),
            "in_time_order": True,
            "sentence": Reason(
                "gate.load_test.first_in_time", {"card": where, "detail": when}
            ).to_json(),
        }
    if not bound_by_card:
        return None
    card, (ratio, detail) = max(
        ((card, max(entries, key=_closest)) for card, entries in bound_by_card.items()),
        key=lambda item: item[1][0],
    )
    code = "gate.load_test.first_by_ratio" if ratio >= 1 else "gate.load_test.closest_by_ratio"
    return {
        "card": card,
        "ratio": ratio,
        "detail": detail.to_json(),
        "in_time_order": False,
        "sentence": Reason(code, {"card": card, "detail": detail, "ratio": ratio}).to_json(),
    }


def _closest(entry: tuple[float, Reason]) -> tuple[float, str]:
    """The highest ratio; between equal ones, the last in English (as the sentences sorted)."""
    ratio, detail = entry
    return ratio, render(detail)


def _source(code: str, **params) -> dict:
    return Reason(f"gate.load_test.source.{code}", params).to_json()


def _sources(request: LoadTestRequest) -> dict:
    run = request.run
    measured = run.source_format == "measured"
    telemetry = request.telemetry
    window = telemetry.window if telemetry else None
    return {
        "latency": _source("runner") if measured else _source("imported", format=run.source_format),
        "rates": _source("runner_hold") if measured else _source("imported_files"),
        "card_peaks": (
            _source("telemetry_window", start=window[0], end=window[1])
            if window
            else _source("no_window")
        ),
        "declared_card_peaks": "" if measured else _source("declared"),
        "real_rates": _source("real_rates"),
    }


def evaluate_load_test(request: LoadTestRequest) -> GateOutcome:
    names = [m.name for m in request.models]
    numbers: dict = {"colocated": names, "run": as_stored(request.run_label or "")}
    reasons = _Reasons()

    def outcome() -> GateOutcome:
        first = numbers.get("first_bound")
        tail = (Reason.from_json(first["sentence"]),) if first else ()
        if reasons.found:
            return GateOutcome(
                Gate.LOAD_TEST,
                GateStatus.FAIL,
                then(reasons.found[0], *tail),
                tuple(reasons.found),
                numbers,
                _sources(request) if request.run else {},
            )
        summary = then(Reason("gate.load_test.all_green", {"count": len(names)}), *tail)
        return GateOutcome(Gate.LOAD_TEST, GateStatus.PASS, summary, (), numbers, _sources(request))

    if request.run is None:
        reasons.add("no_result", models=", ".join(names))
        return outcome()
    if request.run_status and request.run_status != "done":
        reasons.add("run_not_finished", status=request.run_status)
        return outcome()

    results = _match(request.models, request.run)
    tested = [result.model for result in request.run.models]
    numbers["tested"] = tested
    if len(request.models) > 1 and len(request.run.models) == 1:
        reasons.add("single_model", tested=tested[0], count=len(names), models=", ".join(names))
        return outcome()

    missing = [name for name in names if name not in results]
    if missing:
        reasons.add("missing_models", models=", ".join(missing))
    overlap = _overlap(results)
    if overlap:
        reasons.add("not_at_once", **overlap)
    present = tuple(m for m in request.models if m.name in results)
    numbers["ratio"] = _ratio(present, results, reasons) if len(present) > 1 else []
    _placement(request, reasons)

    model_rows = []
    bound_by_card: dict[str, list[tuple[float, Reason]]] = {}
    for model in request.models:
        result = results.get(model.name)
        row = {"model": model.name, "slo_ms": model.slo_ms, "cards": list(model.cards)}
        model_rows.append(row)
        if result is None:
            continue
        row |= {
            "p99_latency_ms": result.p99_latency_ms,
            "p99_ttft_ms": result.p99_ttft_ms,
            "rate": result.rate,
            "completed": result.completed,
            "failed": result.failed,
            "source": result.source,
        }
        sent = request.sent.get(model.name) or (result.completed or 0) + (result.failed or 0)
        if result.failed and sent and result.failed / sent > MAX_FAILED_SHARE:
            errors = request.errors.get(model.name) or {"failed": result.failed}
            reasons.add(
                "requests_failed",
                model=model.name,
                failed=result.failed,
                sent=sent,
                errors=", ".join(f"{code} {n}" for code, n in sorted(errors.items())),
                by_code=errors,
            )
        if result.p99_latency_ms is None:
            reasons.add("no_p99", source=result.source, model=model.name)
        elif model.slo_ms is None:
            reasons.add("no_slo", model=model.name)
        else:
            ratio = result.p99_latency_ms / model.slo_ms
            row["latency_ratio"] = ratio
            if ratio > 1:
                reasons.add(
                    "p99_over_slo", model=model.name, p99_ms=result.p99_latency_ms,
                    slo_ms=model.slo_ms,
                )  # fmt: skip
            detail = Reason(
                "gate.load_test.latency_of_slo",
                {"model": model.name, "p99_ms": result.p99_latency_ms, "slo_ms": model.slo_ms},
            )
            for card in model.cards:
                bound_by_card.setdefault(card, []).append((ratio, detail))
    numbers["models"] = model_rows
    numbers["cards"] = _memory(request, reasons, bound_by_card)
    first = _first_bound(request, bound_by_card)
    if first:
        numbers["first_bound"] = first
    return outcome()
