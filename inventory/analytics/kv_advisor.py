"""KV reservation advice per deployment, from its history of concurrency and tokens in use.

Sizing: ``recommended = ceil(P95 or peak running requests) x tokens per request x bytes per
token x (1 + buffer)``. Concurrency is rounded up to whole requests because a reservation for
12.4 requests fails the 13th.

Demand of one sample, used for excursions: its tokens in use x bytes per token when the sample
has them (the real KV footprint), else running requests x tokens per request x bytes per token.

Flags:

- ``reserved_at_mean``: the current reservation is at most ``(1 + mean_tolerance)`` times the
  mean need (mean concurrency x tokens per request x bytes per token, no buffer), or below the
  P95 need (the same at P95 concurrency). Either way the peaks are not covered: a reservation
  at the mean counts as no reservation.
- ``reservation_exceeded``: demand went above the current reservation at least once in the
  window (default the last 7 days before the latest sample); the count is of distinct
  excursions (runs of consecutive samples above), not of samples.
- ``no_admission_policy``: nothing decides what happens to demand above the reservation; P95
  is not a ceiling, so every reservation needs one.
- ``buffer_outside_policy``: the buffer is outside the 15-20% policy (any value in [0, 1] is
  still computed).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import numpy as np

from inventory.analytics.kv import (
    DEFAULT_BUFFER,
    MEAN_TOLERANCE,
    POLICY_BUFFER_MAX,
    POLICY_BUFFER_MIN,
    KvShape,
    kv_reservation_bytes,
    kv_reservation_gap_bytes,
    kv_reservation_per_card,
    recommended_kv_reservation_bytes,
    whole_requests,
)
from inventory.analytics.reasons import Reason, gettext_noop, register
from inventory.analytics.stats import (
    count_array_excursions,
    count_excursions,
    mean,
    percentile,
    sorted_array_percentile,
)

SEVEN_DAYS_S = 7 * 24 * 3600.0

MESSAGES = register(
    {
        "kv_advice.sizing": gettext_noop(
            "{basis} concurrency {sized:.1f} -> {requests} requests x {tokens:,.0f} tokens x "
            "{bytes_per_token:,.0f} B/token x {factor:.2f} = {recommended:gib} recommended; "
            "current {current:gib}"
        ),
        "kv_advice.mean_level": gettext_noop(
            "current {current:gib} is a mean-level reservation (mean need {mean_need:gib}, P95 "
            "need {p95_need:gib}): it counts as none"
        ),
        "kv_advice.exceeded": gettext_noop(
            "demand exceeded the {current:gib} reservation {excursions} times in the last "
            "{days:g} days (peak {peak:gib})"
        ),
        "kv_advice.no_policy": gettext_noop(
            "no admission/degradation policy for demand above the reservation (queue, shed, "
            "shrink a low-priority KV, evict or refuse)"
        ),
        "kv_advice.buffer_outside": gettext_noop(
            "buffer {buffer:.0%} is outside the {low:.0%}-{high:.0%} policy"
        ),
        "kv_advice.per_card": gettext_noop(
            "on each of its {cards} cards (TP {tp}, PP {pp}): {recommended:gib} recommended, "
            "{current:gib} now"
        ),
    }
)


class SizingBasis(StrEnum):
    P95 = "p95"
    PEAK = "peak"


class AdmissionPolicy(StrEnum):
    """What happens to demand above the reservation."""

    QUEUE = "queue"
    SHED_LOW_PRIORITY = "shed_low_priority"
    SHRINK_LOW_PRIORITY_KV = "shrink_low_priority_kv"
    EVICT_LOW_PRIORITY = "evict_low_priority"
    REFUSE = "refuse"


class KvFlag(StrEnum):
    RESERVED_AT_MEAN = "reserved_at_mean"
    RESERVATION_EXCEEDED = "reservation_exceeded"
    NO_ADMISSION_POLICY = "no_admission_policy"
    BUFFER_OUTSIDE_POLICY = "buffer_outside_policy"


class KvDemandSample(NamedTuple):
    """A tuple: a week of minutes is ten thousand samples a deployment."""

    at: float
    running_requests: float
    tokens_in_use: float | None = None


@dataclass(frozen=True)
class KvAdvice:
    deployment: str
    samples: int
    mean_concurrency: float
    p95_concurrency: float
    peak_concurrency: float
    p95_tokens_in_use: float | None
    peak_tokens_in_use: float | None
    tokens_per_request: float
    bytes_per_token: float
    buffer: float
    sizing: SizingBasis
    current_reservation_bytes: int
    mean_need_bytes: int
    p95_need_bytes: int
    recommended_bytes: int
    window_s: float
    window_peak_demand_bytes: float
    excursions_in_window: int
    flags: frozenset[KvFlag]
    explanations: tuple[Reason, ...]  # read with inventory.analytics.reasons.render
    # The same reservations as each card of the deployment holds them (kv_reservation_per_card).
    current_per_card_bytes: int = 0
    recommended_per_card_bytes: int = 0
    per_card_how: str = "even_split"

    @property
    def gap_bytes(self) -> int:
        return kv_reservation_gap_bytes(self.recommended_bytes, self.current_reservation_bytes)


class _Observed(NamedTuple):
    """What the advice reads of a history: its concurrency figures, its tokens in use, and
    its demand inside the window against the current reservation."""

    samples: int
    mean_concurrency: float
    p95_concurrency: float
    peak_concurrency: float
    p95_tokens_in_use: float | None
    peak_tokens_in_use: float | None
    excursions: int
    window_peak: float


def _observed_tokens_per_request(samples: Sequence[KvDemandSample]) -> float:
    ratios = [
        s.tokens_in_use / s.running_requests
        for s in samples
        if s.tokens_in_use is not None and s.running_requests > 0
    ]
    if not ratios:
        raise ValueError("tokens_per_request not given and no sample has tokens in use")
    # The busy end of the per-request size, not its average, so long requests are covered.
    return percentile(ratios, 95)


def _check_options(mean_tolerance: float, window_s: float) -> None:
    if mean_tolerance < 0 or window_s <= 0:
        raise ValueError("mean_tolerance must be >= 0 and window_s > 0")


def advise_kv_reservation(
    deployment: str,
    samples: Sequence[KvDemandSample],
    *,
    current_reservation_bytes: int,
    bytes_per_token: float,
    tokens_per_request: float | None = None,
    buffer: float = DEFAULT_BUFFER,
    sizing: SizingBasis = SizingBasis.P95,
    admission_policy: AdmissionPolicy | None = None,
    mean_tolerance: float = MEAN_TOLERANCE,
    window_s: float = SEVEN_DAYS_S,
    now: float | None = None,
    shape: KvShape | None = None,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
) -> KvAdvice:
    """Advice for one deployment; ``tokens_per_request`` defaults to the observed P95."""
    if not samples:
        raise ValueError(f"{deployment}: no demand samples")
    _check_options(mean_tolerance, window_s)
    ordered = sorted(samples, key=lambda s: s.at)
    per_request = (
        _observed_tokens_per_request(ordered) if tokens_per_request is None else tokens_per_request
    )
    end = ordered[-1].at if now is None else now
    window_demand = [
        (s.tokens_in_use if s.tokens_in_use is not None else s.running_requests * per_request)
        * bytes_per_token
        for s in ordered
        if end - window_s < s.at <= end
    ]
    running = [s.running_requests for s in ordered]
    tokens = [s.tokens_in_use for s in ordered if s.tokens_in_use is not None]
    observed = _Observed(
        samples=len(running),
        mean_concurrency=mean(running),
        p95_concurrency=percentile(running, 95),
        peak_concurrency=max(running),
        p95_tokens_in_use=percentile(tokens, 95) if tokens else None,
        peak_tokens_in_use=max(tokens) if tokens else None,
        excursions=count_excursions(window_demand, current_reservation_bytes),
        window_peak=max(window_demand, default=0.0),
    )
    return _advise(
        deployment,
        observed,
        current=current_reservation_bytes,
        bytes_per_token=bytes_per_token,
        per_request=per_request,
        buffer=buffer,
        sizing=sizing,
        admission_policy=admission_policy,
        mean_tolerance=mean_tolerance,
        window_s=window_s,
        shape=shape,
        tensor_parallel=tensor_parallel,
        pipeline_parallel=pipeline_parallel,
    )


def advise_kv_reservation_from_peaks(
    deployment: str,
    running: Sequence[float] | np.ndarray,
    *,
    current_reservation_bytes: int,
    bytes_per_token: float,
    tokens_per_request: float,
    buffer: float = DEFAULT_BUFFER,
    sizing: SizingBasis = SizingBasis.P95,
    admission_policy: AdmissionPolicy | None = None,
    mean_tolerance: float = MEAN_TOLERANCE,
    window_s: float = SEVEN_DAYS_S,
    shape: KvShape | None = None,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
) -> KvAdvice:
    """`advise_kv_reservation` over samples without tokens in use that all lie in the window,
    given as their running requests alone, oldest first.

    The host page's form of the same advice: a week of minutes is read as one array of peaks a
    deployment, not as ten thousand timed samples to build and sort again. Its figures are
    computed over the array, each the same number to the last bit as over the samples: the
    mean as an exact sum, the P95 off the sorted array, the demand multiplied in the same
    order.
    """
    if not len(running):
        raise ValueError(f"{deployment}: no demand samples")
    _check_options(mean_tolerance, window_s)
    peaks = np.asarray(running, dtype=float)
    window_demand = peaks * tokens_per_request * bytes_per_token
    observed = _Observed(
        samples=len(peaks),
        mean_concurrency=mean(peaks.tolist()),
        p95_concurrency=sorted_array_percentile(np.sort(peaks), 95),
        peak_concurrency=peaks.max().item(),
        p95_tokens_in_use=None,
        peak_tokens_in_use=None,
        excursions=count_array_excursions(window_demand, current_reservation_bytes),
        window_peak=window_demand.max().item(),
    )
    return _advise(
        deployment,
        observed,
        current=current_reservation_bytes,
        bytes_per_token=bytes_per_token,
        per_request=tokens_per_request,
        buffer=buffer,
        sizing=sizing,
        admission_policy=admission_policy,
        mean_tolerance=mean_tolerance,
        window_s=window_s,
        shape=shape,
        tensor_parallel=tensor_parallel,
        pipeline_parallel=pipeline_parallel,
    )


def _advise(
    deployment: str,
    observed: _Observed,
    *,
    current: int,
    bytes_per_token: float,
    per_request: float,
    buffer: float,
    sizing: SizingBasis,
    admission_policy: AdmissionPolicy | None,
    mean_tolerance: float,
    window_s: float,
    shape: KvShape | None,
    tensor_parallel: int,
    pipeline_parallel: int,
) -> KvAdvice:
    """The advice, from what was observed."""
    mean_concurrency = observed.mean_concurrency
    p95_concurrency = observed.p95_concurrency
    peak_concurrency = observed.peak_concurrency

    sized_concurrency = p95_concurrency if sizing is SizingBasis.P95 else peak_concurrency
    recommended = recommended_kv_reservation_bytes(
        sized_concurrency, per_request, bytes_per_token, buffer
    )
    mean_need = kv_reservation_bytes(mean_concurrency, per_request, bytes_per_token, 0)
    p95_need = kv_reservation_bytes(p95_concurrency, per_request, bytes_per_token, 0)

    excursions = observed.excursions
    window_peak = observed.window_peak

    explanations = [
        Reason(
            "kv_advice.sizing",
            {
                "basis": sizing.upper(),
                "sized": sized_concurrency,
                "requests": whole_requests(sized_concurrency),
                "tokens": per_request,
                "bytes_per_token": bytes_per_token,
                "factor": 1 + buffer,
                "recommended": recommended,
                "current": current,
            },
        )
    ]
    flags = set()
    if current <= mean_need * (1 + mean_tolerance) or current < p95_need:
        flags.add(KvFlag.RESERVED_AT_MEAN)
        explanations.append(
            Reason(
                "kv_advice.mean_level",
                {"current": current, "mean_need": mean_need, "p95_need": p95_need},
            )
        )
    if excursions:
        flags.add(KvFlag.RESERVATION_EXCEEDED)
        explanations.append(
            Reason(
                "kv_advice.exceeded",
                {
                    "current": current,
                    "excursions": excursions,
                    "days": window_s / 86400,
                    "peak": window_peak,
                },
            )
        )
    if admission_policy is None:
        flags.add(KvFlag.NO_ADMISSION_POLICY)
        explanations.append(Reason("kv_advice.no_policy"))
    if not POLICY_BUFFER_MIN <= buffer <= POLICY_BUFFER_MAX:
        flags.add(KvFlag.BUFFER_OUTSIDE_POLICY)
        explanations.append(
            Reason(
                "kv_advice.buffer_outside",
                {"buffer": buffer, "low": POLICY_BUFFER_MIN, "high": POLICY_BUFFER_MAX},
            )
        )

    current_card = kv_reservation_per_card(current, shape, tensor_parallel, pipeline_parallel)
    recommended_card = kv_reservation_per_card(
        recommended, shape, tensor_parallel, pipeline_parallel
    )
    if tensor_parallel * pipeline_parallel > 1:
        explanations.append(
            Reason(
                "kv_advice.per_card",
                {
                    "cards": tensor_parallel * pipeline_parallel,
                    "tp": tensor_parallel,
                    "pp": pipeline_parallel,
                    "recommended": recommended_card.bytes,
                    "current": current_card.bytes,
                },
            )
        )
    return KvAdvice(
        deployment=deployment,
        samples=observed.samples,
        mean_concurrency=mean_concurrency,
        p95_concurrency=p95_concurrency,
        peak_concurrency=peak_concurrency,
        p95_tokens_in_use=observed.p95_tokens_in_use,
        peak_tokens_in_use=observed.peak_tokens_in_use,
        tokens_per_request=per_request,
        bytes_per_token=bytes_per_token,
        buffer=buffer,
        sizing=sizing,
        current_reservation_bytes=current,
        mean_need_bytes=mean_need,
        p95_need_bytes=p95_need,
        recommended_bytes=recommended,
        window_s=window_s,
        window_peak_demand_bytes=window_peak,
        excursions_in_window=excursions,
        flags=frozenset(flags),
        explanations=tuple(explanations),
        current_per_card_bytes=current_card.bytes,
        recommended_per_card_bytes=recommended_card.bytes,
        per_card_how=current_card.how,
    )
