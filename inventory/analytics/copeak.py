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
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from console.reasons import Reason, gettext_noop, register
from inventory.analytics.series import Sample, align_on_common_timestamps
from inventory.analytics.stats import count_exceedances, percentile

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
    explanation: Reason  # read with console.reasons.render

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
    if min_copeaking < 2:
        raise ValueError("min_copeaking must be >= 2: one deployment alone does not co-peak")
    timestamps, values = align_on_common_timestamps(demand)
    if not timestamps:
        raise ValueError(f"card {card_id}: the demand series share no timestamp")
    names = tuple(sorted(values))
    joint = [sum(moment) for moment in zip(*(values[n] for n in names), strict=True)]
    individual_p95 = tuple((name, percentile(values[name], 95)) for name in names)
    sum_of_p95 = sum(p95 for _, p95 in individual_p95)
    peak_lines = {name: percentile(values[name], peak_pct) for name in names}
    copeaking_moments = sum(
        1
        for index in range(len(timestamps))
        if sum(values[name][index] > peak_lines[name] for name in names) >= min_copeaking
    )
    usable = capacity_bytes - headroom_bytes
    over = count_exceedances(joint, usable)
    joint_peak = max(joint)

    verdict = "copeak.fits" if joint_peak <= usable else "copeak.does_not_fit"
    if sum_of_p95 <= usable < joint_peak:
        verdict = "copeak.collides"
    explanation = Reason(
        "copeak.explanation",
        {
            "sum_of_p95": sum_of_p95,
            "joint_p95": percentile(joint, 95),
            "joint_peak": joint_peak,
            "usable": usable,
            "copeaking": copeaking_moments,
            "moments": len(joint),
            "over": over,
            "verdict": Reason(verdict),
        },
    )
    return CoPeakReport(
        card_id=card_id,
        deployments=names,
        samples=len(joint),
        capacity_bytes=capacity_bytes,
        headroom_bytes=headroom_bytes,
        individual_p95_bytes=individual_p95,
        sum_of_p95_bytes=sum_of_p95,
        joint_p50_bytes=percentile(joint, 50),
        joint_p95_bytes=percentile(joint, 95),
        joint_p99_bytes=percentile(joint, 99),
        joint_peak_bytes=joint_peak,
        copeak_fraction=copeaking_moments / len(joint),
        oom_risk_fraction=over / len(joint),
        explanation=explanation,
    )
