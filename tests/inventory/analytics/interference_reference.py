"""The interference grouping as it stood before it moved onto numpy arrays (each latency sample
looked up in each co-tenant's load one by one), kept only as the reference the array code must
match figure for figure."""

from bisect import bisect_right

from inventory.analytics.stats import percentile


class AsOf:
    def __init__(self, samples, max_age_s):
        ordered = sorted(samples)
        self._times = [at for at, _ in ordered]
        self._values = [value for _, value in ordered]
        self._max_age_s = max_age_s

    def __call__(self, at):
        index = bisect_right(self._times, at) - 1
        if index < 0 or at - self._times[index] > self._max_age_s:
            return None
        return self._values[index]


def interference_figures(latencies, cotenant_load, *, busy_threshold, tail_pct=99.0,
                         max_age_s=60.0):  # fmt: skip
    """Every figure of an InterferenceReport but the verdict's wording."""
    lookups = {name: AsOf(samples, max_age_s) for name, samples in cotenant_load.items()}
    busy, idle, unknown = [], [], 0
    for at, latency in latencies:
        loads = [lookup(at) for lookup in lookups.values()]
        if any(load is not None and load >= busy_threshold for load in loads):
            busy.append(latency)
        elif loads and all(load is not None for load in loads):
            idle.append(latency)
        else:
            unknown += 1
    busy_tail = percentile(busy, tail_pct) if busy else None
    idle_tail = percentile(idle, tail_pct) if idle else None
    ratio = None
    if busy_tail is not None and idle_tail is not None:
        ratio = busy_tail / idle_tail if idle_tail > 0 else float("inf")
    return {
        "busy_samples": len(busy),
        "idle_samples": len(idle),
        "unknown_samples": unknown,
        "busy_tail_s": busy_tail,
        "idle_tail_s": idle_tail,
        "ratio": ratio,
    }


def report_figures(report) -> dict:
    return {
        "busy_samples": report.busy_samples,
        "idle_samples": report.idle_samples,
        "unknown_samples": report.unknown_samples,
        "busy_tail_s": report.busy_tail_s,
        "idle_tail_s": report.idle_tail_s,
        "ratio": report.ratio,
    }
