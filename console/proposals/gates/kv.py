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
from inventory.analytics.units import format_gib


@dataclass(frozen=True)
class Concurrency:
    p95: float
    source: str  # where the figures come from, in words
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
    reasons: list[str] = []
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
        reasons.append(
            "No admission/degradation policy for demand above the reservation: P95 is not a "
            "ceiling (queue, shed low-priority load, shrink or evict a low-priority model, or "
            "refuse)."
        )
    if request.basis == "mean":
        reasons.append(
            "The reservation is sized at the mean concurrency: a reservation at the mean "
            "counts as no reservation."
        )
    if request.basis == "none" or reservation == 0:
        reasons.append("There is no KV reservation.")
    if not request.bytes_per_token:
        reasons.append(
            f"KV bytes per token of {request.model} are unknown: give them, or the model's shape."
        )
    if not request.tokens_per_request:
        reasons.append("Tokens per request are not stated.")
    concurrency = request.concurrency
    if concurrency is None:
        reasons.append(
            "P95 concurrency is unknown: the deployment has no engine history; state the "
            "expected P95 concurrency."
        )
    else:
        evidence["concurrency_source"] = concurrency.source
        numbers.update(
            p95_concurrency=concurrency.p95,
            mean_concurrency=concurrency.mean,
            peak_concurrency=concurrency.peak,
            samples=concurrency.samples,
        )

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
        formula = (
            f"ceil({label} {sized:.1f}) = {requests} requests x "
            f"{request.tokens_per_request:,.0f} tokens x {request.bytes_per_token:,.0f} B/token x "
            f"(1 + {request.buffer:.0%}) = {format_gib(required)}"
        )
        evidence["formula"] = formula
        if reservation < required:
            reasons.append(
                f"The reservation of {format_gib(reservation)} is below the need: {formula}."
            )
        if concurrency.mean is not None:
            mean_need = kv_reservation_bytes(
                concurrency.mean, request.tokens_per_request, request.bytes_per_token, 0
            )
            numbers["mean_need_bytes"] = mean_need
            if request.basis != "mean" and 0 < reservation <= mean_need * (1 + MEAN_TOLERANCE):
                reasons.append(
                    f"{format_gib(reservation)} is a mean-level reservation (mean need "
                    f"{format_gib(mean_need)} at {concurrency.mean:.1f} requests): it counts "
                    "as none."
                )

    if reasons:
        return GateOutcome(Gate.KV, GateStatus.FAIL, reasons[0], tuple(reasons), numbers,
                           evidence)  # fmt: skip
    summary = (
        f"{format_gib(reservation)} covers {evidence['formula']}; above it: "
        f"{request.admission_policy.replace('_', ' ')}."
    )
    return GateOutcome(Gate.KV, GateStatus.PASS, summary, (), numbers, evidence)
