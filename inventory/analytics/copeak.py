"""Co-peak analysis for the deployments sharing one card: do their peaks collide?

Each deployment can fit at its own P95 while the card still runs out when they peak together;
the sum of individual P95s hides exactly that. This module looks at the summed demand at the
same moments instead.

Definitions:

- Demand series are aligned on the timestamps every series has (see
  :func:`inventory.analytics.series.align_on_common_timestamps`); other samples are dropped.
- Joint demand at a moment is the sum of the deployments' demand at that moment.
- Co-peak fraction: the share of moments at which at least ``min_copeaking`` (default 2)
  deployments are strictly above their own ``peak_pct`` percentile (default P90).
- Usable capacity is ``capacity_bytes - headroom_bytes``; pass as capacity what the card
  leaves to processes (total minus driver reserve).
- OOM risk: the share of moments at which joint demand exceeds usable capacity.
- A hidden collision: the sum of individual P95s fits, but the joint peak does not.

A week of a card's minutes is ten thousand moments a tenant: the figures are computed over numpy
arrays, with the percentiles of :mod:`inventory.analytics.stats` read off the sorted arrays, so
each figure is the same number to the last bit as over plain sequences (for values below 2**53,
as byte counts are, where a float64 holds every integer).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from inventory.analytics.reasons import Reason, gettext_noop, register
from inventory.analytics.series import Sample, align_on_common_timestamps
from inventory.analytics.stats import sorted_array_percentile

MESSAGES = register(
    {
        "copeak.explanation": gettext_noop(
            "sum of P95s {sum_of_p95:gib}, joint P95 {joint_p95:gib}, joint peak "
            "{joint_peak:gib} vs {usable:gib} usable; {copeaking}/{moments} moments co-peak, "
            "{over} over capacity: {verdict}"
        ),
        "copeak.fits": gettext_noop("fits"),
        "copeak.does_not_fit": gettext_noop("does not fit"),
        "copeak.collides": gettext_noop(
            "does not fit although the sum of P95s does: peaks collide"
        ),
    }
)


@dataclass(frozen=True)
class CoPeakReport:
    card_id: str
    deployments: tuple[str, ...]
    samples: int
    capacity_bytes: int
    headroom_bytes: int
    individual_p95_bytes: tuple[tuple[str, float], ...]
    sum_of_p95_bytes: float
    joint_p50_bytes: float
    joint_p95_bytes: float
    joint_p99_bytes: float
    joint_peak_bytes: float
    copeak_fraction: float
    oom_risk_fraction: float
    explanation: Reason  # read with inventory.analytics.reasons.render

    @property
    def usable_bytes(self) -> int:
        return self.capacity_bytes - self.headroom_bytes

    @property
    def sum_of_p95_fits(self) -> bool:
        return self.sum_of_p95_bytes <= self.usable_bytes

    @property
    def joint_peak_fits(self) -> bool:
        return self.joint_peak_bytes <= self.usable_bytes

    @property
    def hidden_collision(self) -> bool:
        return self.sum_of_p95_fits and not self.joint_peak_fits


def analyse_copeak(
    card_id: str,
    demand: Mapping[str, Sequence[Sample]],
    *,
    capacity_bytes: int,
    headroom_bytes: int = 0,
    peak_pct: float = 90.0,
    min_copeaking: int = 2,
) -> CoPeakReport:
    """Co-peak report for one card; ``demand`` maps deployment to ``(epoch s, bytes)`` samples."""
    _, values = align_on_common_timestamps(demand)
    return analyse_aligned_copeak(
        card_id,
        {name: np.asarray(series) for name, series in values.items()},
        capacity_bytes=capacity_bytes,
        headroom_bytes=headroom_bytes,
        peak_pct=peak_pct,
        min_copeaking=min_copeaking,
    )


def analyse_aligned_copeak(
    card_id: str,
    values: Mapping[str, np.ndarray],
    *,
    capacity_bytes: int,
    headroom_bytes: int = 0,
    peak_pct: float = 90.0,
    min_copeaking: int = 2,
) -> CoPeakReport:
    """As :func:`analyse_copeak`, for demand already aligned: one array a deployment, equally
    long, element ``i`` of each at the same moment (what :func:`longest_shared_tenancy`
    returns)."""
    if min_copeaking < 2:
        raise ValueError("min_copeaking must be >= 2: one deployment alone does not co-peak")
    names = tuple(sorted(values))
    moments = len(values[names[0]]) if names else 0
    if not moments:
        raise ValueError(f"card {card_id}: the demand series share no timestamp")
    # Summed in the names' order, one deployment after the other, as a sum over each moment's
    # values would be: the same floats, rounded at the same steps.
    joint = values[names[0]]
    for name in names[1:]:
        joint = joint + values[name]
    ordered = {name: np.sort(values[name]) for name in names}
    joint_ordered = np.sort(joint)
    individual_p95 = tuple((name, sorted_array_percentile(ordered[name], 95)) for name in names)
    sum_of_p95 = sum(p95 for _, p95 in individual_p95)
    above_peak = sum(
        (values[name] > sorted_array_percentile(ordered[name], peak_pct)).astype(np.int64)
        for name in names
    )
    copeaking_moments = int(np.count_nonzero(above_peak >= min_copeaking))
    usable = capacity_bytes - headroom_bytes
    over = int(np.count_nonzero(joint > usable))
    joint_peak = joint_ordered[-1].item()

    verdict = "copeak.fits" if joint_peak <= usable else "copeak.does_not_fit"
    if sum_of_p95 <= usable < joint_peak:
        verdict = "copeak.collides"
    joint_p95 = sorted_array_percentile(joint_ordered, 95)
    explanation = Reason(
        "copeak.explanation",
        {
            "sum_of_p95": sum_of_p95,
            "joint_p95": joint_p95,
            "joint_peak": joint_peak,
            "usable": usable,
            "copeaking": copeaking_moments,
            "moments": moments,
            "over": over,
            "verdict": Reason(verdict),
        },
    )
    return CoPeakReport(
        card_id=card_id,
        deployments=names,
        samples=moments,
        capacity_bytes=capacity_bytes,
        headroom_bytes=headroom_bytes,
        individual_p95_bytes=individual_p95,
        sum_of_p95_bytes=sum_of_p95,
        joint_p50_bytes=sorted_array_percentile(joint_ordered, 50),
        joint_p95_bytes=joint_p95,
        joint_p99_bytes=sorted_array_percentile(joint_ordered, 99),
        joint_peak_bytes=joint_peak,
        copeak_fraction=copeaking_moments / moments,
        oom_risk_fraction=over / moments,
        explanation=explanation,
    )


def longest_shared_tenancy(
    series: Mapping[str, tuple[np.ndarray, np.ndarray]],
) -> dict[str, np.ndarray]:
    """The tenants that shared the card longest, aligned over the moments they shared it.

    ``series`` maps each deployment ever on the card to its ``(timestamps, values)`` arrays,
    timestamps ascending and unique. A card's tenants change when placements change (a switch
    to GPU groups leaves one); the co-peak question is only asked of deployments that were on
    the card at the same moments: the set of two or more present together at the most moments
    (the larger set on a tie, then the one present most recently). Returns each of its
    deployments' values at those moments, in time order; empty when no two ever overlapped.
    """
    names = sorted(series)
    if len(names) < 2:
        return {}
    # Sorted and deduplicated by hand: numpy's hashing `unique` is several times slower here.
    moments = np.sort(np.concatenate([series[name][0] for name in names]))
    first_of_its_time = np.ones(len(moments), dtype=bool)
    first_of_its_time[1:] = moments[1:] != moments[:-1]
    moments = moments[first_of_its_time]
    present = np.zeros((len(moments), len(names)), dtype=bool)
    for column, name in enumerate(names):
        present[np.searchsorted(moments, series[name][0]), column] = True
    # Each moment's set of tenants as one number, a bit a deployment (Python integers past 62
    # tenants, a week of many redeployments, where an int64 would overflow).
    bits = np.array([1 << column for column in range(len(names))],
                    dtype=np.int64 if len(names) < 63 else object)  # fmt: skip
    codes, first, which, counts = np.unique(
        present @ bits, return_index=True, return_inverse=True, return_counts=True
    )
    sizes = present[first].sum(axis=1)
    latest = np.full(len(codes), -1)
    np.maximum.at(latest, which, np.arange(len(moments)))
    shared = np.flatnonzero(sizes >= 2)
    if not len(shared):
        return {}
    best = shared[np.lexsort((latest[shared], sizes[shared], counts[shared]))[-1]]
    at = moments[which == best]
    return {
        name: series[name][1][np.searchsorted(series[name][0], at)]
        for column, name in enumerate(names)
        if present[first[best], column]
    }
