"""The co-peak computation as it stood before it moved onto numpy arrays (plain Python over
sample lists), kept only as the reference the array code must match figure for figure."""

from inventory.analytics.series import align_on_common_timestamps
from inventory.analytics.stats import count_exceedances, percentile


def longest_shared_tenancy(per_deployment: dict[str, list]) -> dict[str, list]:
    present: dict[float, set[str]] = {}
    for name, samples in per_deployment.items():
        for at, _ in samples:
            present.setdefault(at, set()).add(name)
    periods: dict[frozenset[str], set[float]] = {}
    for at, names in present.items():
        if len(names) >= 2:
            periods.setdefault(frozenset(names), set()).add(at)
    if not periods:
        return {}
    names, moments = max(periods.items(), key=lambda item: (len(item[1]), len(item[0])))
    return {
        name: [sample for sample in per_deployment[name] if sample[0] in moments] for name in names
    }


def copeak_figures(demand, *, capacity_bytes, headroom_bytes=0, peak_pct=90.0, min_copeaking=2):
    """Every figure of a CoPeakReport but the card and the explanation's wording."""
    timestamps, values = align_on_common_timestamps(demand)
    names = tuple(sorted(values))
    joint = [sum(moment) for moment in zip(*(values[n] for n in names), strict=True)]
    individual_p95 = tuple((name, percentile(values[name], 95)) for name in names)
    peak_lines = {name: percentile(values[name], peak_pct) for name in names}
    copeaking = sum(
        1
        for index in range(len(timestamps))
        if sum(values[name][index] > peak_lines[name] for name in names) >= min_copeaking
    )
    usable = capacity_bytes - headroom_bytes
    over = count_exceedances(joint, usable)
    return {
        "deployments": names,
        "samples": len(joint),
        "individual_p95_bytes": individual_p95,
        "sum_of_p95_bytes": sum(p95 for _, p95 in individual_p95),
        "joint_p50_bytes": percentile(joint, 50),
        "joint_p95_bytes": percentile(joint, 95),
        "joint_p99_bytes": percentile(joint, 99),
        "joint_peak_bytes": max(joint),
        "copeak_fraction": copeaking / len(joint),
        "oom_risk_fraction": over / len(joint),
        "copeaking": copeaking,
        "over": over,
    }


def report_figures(report) -> dict:
    """The same figures read off a CoPeakReport, to compare with `copeak_figures`."""
    params = report.explanation.params
    return {
        "deployments": report.deployments,
        "samples": report.samples,
        "individual_p95_bytes": report.individual_p95_bytes,
        "sum_of_p95_bytes": report.sum_of_p95_bytes,
        "joint_p50_bytes": report.joint_p50_bytes,
        "joint_p95_bytes": report.joint_p95_bytes,
        "joint_p99_bytes": report.joint_p99_bytes,
        "joint_peak_bytes": report.joint_peak_bytes,
        "copeak_fraction": report.copeak_fraction,
        "oom_risk_fraction": report.oom_risk_fraction,
        "copeaking": params["copeaking"],
        "over": params["over"],
    }
