"""Gate 2, the KV reservation: sized for the busy end of the day, with a plan above it (pure).

    required = ceil(P95 concurrency) x tokens per request x KV bytes per token x (1 + buffer)

(the historical peak instead of P95 when the reservation says it is peak-based). Concurrency is
rounded up to whole requests: a reservation for 12.4 requests fails the 13th.

The gate fails when the reservation is below that, when it was sized at the **mean** (a
reservation at the mean counts as none), when there is none, or when nothing decides what
happens to demand above it (P95 is not a ceiling: queue, shed, shrink or evict a low-priority
model, or refuse).
"""

from dataclasses import dataclass

from console.proposals.gates import Gate, GateOutcome, GateStatus
from inventory.analytics.kv import (
    MEAN_TOLERANCE,
    kv_reservation_bytes,
    kv_reservation_gap_bytes,
    recommended_kv_reservation_bytes,
    whole_requests,
)
from inventory.analytics.reasons import Reason, as_stored, gettext_noop, register

MESSAGES = register(
    {
        "gate.kv.no_policy": gettext_noop(
            "No admission/degradation policy for demand above the reservation: P95 is not a "
            "ceiling (queue, shed low-priority load, shrink or evict a low-priority model, or "
            "refuse)."
        ),
        "gate.kv.sized_at_mean": gettext_noop(
            "The reservation is sized at the mean concurrency: a reservation at the mean "
            "counts as no reservation."
        ),
        "gate.kv.no_reservation": gettext_noop("There is no KV reservation."),
        "gate.kv.bytes_unknown": gettext_noop(
            "KV bytes per token of {model} are unknown: give them, or the model's shape."
        ),
        "gate.kv.tokens_unknown": gettext_noop("Tokens per request are not stated."),
        "gate.kv.concurrency_unknown": gettext_noop(
            "P95 concurrency is unknown: the deployment has no engine history; state the "
            "expected P95 concurrency."
        ),
        "gate.kv.formula": gettext_noop(
            "ceil(P95 {sized:.1f}) = {requests} requests x {tokens:,.0f} tokens x "
            "{bytes_per_token:,.0f} B/token x (1 + {buffer:.0%}) = {required:gib}"
        ),
        "gate.kv.formula_peak": gettext_noop(
            "ceil(peak {sized:.1f}) = {requests} requests x {tokens:,.0f} tokens x "
            "{bytes_per_token:,.0f} B/token x (1 + {buffer:.0%}) = {required:gib}"
        ),
        "gate.kv.below_need": gettext_noop(
            "The reservation of {reservation:gib} is below the need: {formula}."
        ),
        "gate.kv.mean_level": gettext_noop(
            "{reservation:gib} is a mean-level reservation (mean need {mean_need:gib} at "
            "{mean:.1f} requests): it counts as none."
        ),
        "gate.kv.covered": gettext_noop("{reservation:gib} covers {formula}; above it: {policy}."),
        # Deployment.Admission, as the summary names it.
        "gate.kv.policy.queue": gettext_noop("queue"),
        "gate.kv.policy.shed_low_priority": gettext_noop("shed low priority"),
        "gate.kv.policy.shrink_low_priority_kv": gettext_noop("shrink low priority kv"),
        "gate.kv.policy.evict_low_priority": gettext_noop("evict low priority"),
        "gate.kv.policy.refuse": gettext_noop("refuse"),
        # Where the concurrency comes from (gate_checks.concurrency_of).
        "gate.kv.source_history": gettext_noop(
            "engine history of {deployment}: {peaks} one-minute peaks of running requests over "
            "the last 7 days"
        ),
        "gate.kv.source_stated": gettext_noop("stated in the proposal"),
    }
)


@dataclass(frozen=True)
class Concurrency:
    p95: float
    source: Reason | str  # where the figures come from
    mean: float | None = None
    peak: float | None = None
    samples: int = 0


@dataclass(frozen=True)
class KvRequest:
    model: str
    basis: str  # Deployment.KvBasis: p95, peak, mean, manual, none
    reservation_bytes: int
    admission_policy: str  # Deployment.Admission; "none" means there is no policy
    buffer: float
    bytes_per_token: float | None
    tokens_per_request: float | None
    concurrency: Concurrency | None


def evaluate_kv(request: KvRequest) -> GateOutcome:
    reasons: list[Reason] = []
    reservation = request.reservation_bytes
    numbers: dict = {
        "model": request.model,
        "basis": request.basis,
        "reservation_bytes": reservation,
        "admission_policy": request.admission_policy,
        "buffer": request.buffer,
        "bytes_per_token": request.bytes_per_token,
        "tokens_per_request": request.tokens_per_request,
    }
    evidence: dict = {}

    if request.admission_policy in ("", "none"):
        reasons.append(Reason("gate.kv.no_policy"))
    if request.basis == "mean":
        reasons.append(Reason("gate.kv.sized_at_mean"))
    if request.basis == "none" or reservation == 0:
        reasons.append(Reason("gate.kv.no_reservation"))
    if not request.bytes_per_token:
        reasons.append(Reason("gate.kv.bytes_unknown", {"model": request.model}))
    if not request.tokens_per_request:
        reasons.append(Reason("gate.kv.tokens_unknown"))
    concurrency = request.concurrency
    if concurrency is None:
        reasons.append(Reason("gate.kv.concurrency_unknown"))
    else:
        evidence["concurrency_source"] = as_stored(concurrency.source)
        numbers.update(
            p95_concurrency=concurrency.p95,
            mean_concurrency=concurrency.mean,
            peak_concurrency=concurrency.peak,
            samples=concurrency.samples,
        )

    formula = None
    if concurrency is not None and request.bytes_per_token and request.tokens_per_request:
        use_peak = request.basis == "peak" and concurrency.peak is not None
        sized = concurrency.peak if use_peak else concurrency.p95
        label = "peak" if use_peak else "P95"
        requests = whole_requests(sized)
        required = recommended_kv_reservation_bytes(
            sized, request.tokens_per_request, request.bytes_per_token, request.buffer
        )
        numbers.update(
            sized_on=label,
            sized_requests=requests,
            required_bytes=required,
            gap_bytes=kv_reservation_gap_bytes(required, reservation),
        )
        formula = Reason(
            "gate.kv.formula_peak" if use_peak else "gate.kv.formula",
            {
                "sized": sized,
                "requests": requests,
                "tokens": request.tokens_per_request,
                "bytes_per_token": request.bytes_per_token,
                "buffer": request.buffer,
                "required": required,
            },
        )
        evidence["formula"] = formula.to_json()
        if reservation < required:
            reasons.append(
                Reason("gate.kv.below_need", {"reservation": reservation, "formula": formula})
            )
        if concurrency.mean is not None:
            mean_need = kv_reservation_bytes(
                concurrency.mean, request.tokens_per_request, request.bytes_per_token, 0
            )
            numbers["mean_need_bytes"] = mean_need
            if request.basis != "mean" and 0 < reservation <= mean_need * (1 + MEAN_TOLERANCE):
                reasons.append(
                    Reason(
                        "gate.kv.mean_level",
                        {
                            "reservation": reservation,
                            "mean_need": mean_need,
                            "mean": concurrency.mean,
                        },
                    )
                )

    if reasons:
        return GateOutcome(Gate.KV, GateStatus.FAIL, reasons[0], tuple(reasons), numbers,
                           evidence)  # fmt: skip
    policy = request.admission_policy
    summary = Reason(
        "gate.kv.covered",
        {
            "reservation": reservation,
            "formula": formula,
            "policy": Reason(f"gate.kv.policy.{policy}")
            if f"gate.kv.policy.{policy}" in MESSAGES
            else policy.replace("_", " "),
        },
    )
    return GateOutcome(Gate.KV, GateStatus.PASS, summary, (), numbers, evidence)
