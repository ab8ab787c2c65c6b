import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inventory.analytics.interference import (
    InterferenceVerdict,
    cotenants_by_deployment,
    interference_by_deployment,
    tail_vs_cotenant_load,
)
from inventory.analytics.reasons import render
from tests.examples import examples
from tests.inventory.analytics import interference_reference as reference

MINUTE = 60.0
# The co-tenant runs 5 requests for the first 50 minutes, then none; one reading a minute.
LOAD = [(i * MINUTE, 5.0 if i < 50 else 0.0) for i in range(100)]


def latencies(busy: list[float], idle: list[float]) -> list[tuple[float, float]]:
    """One latency 30 s into each minute: the busy ones first, then the idle ones."""
    return [(i * MINUTE + 30, latency) for i, latency in enumerate([*busy, *idle])]


def p99(values: list[float]) -> float:
    # Hand-computed type-7 P99 for 50 values where only the largest differs: rank 48.51.
    ordered = sorted(values)
    return ordered[48] + 0.51 * (ordered[49] - ordered[48])


def test_tail_that_rises_with_cotenant_load_is_flagged():
    busy = [0.5] * 49 + [1.0]
    idle = [0.3] * 49 + [0.4]
    report = tail_vs_cotenant_load("chat", latencies(busy, idle), {"code": LOAD}, busy_threshold=1)
    assert report.busy_samples == 50
    assert report.idle_samples == 50
    assert report.busy_tail_s == pytest.approx(p99(busy))  # 0.755
    assert report.idle_tail_s == pytest.approx(p99(idle))  # 0.351
    assert report.ratio == pytest.approx(p99(busy) / p99(idle))
    assert report.verdict is InterferenceVerdict.TAIL_RISES
    assert report.flagged
    assert report.explanation.params["outcome"].code == "interference.tail_rises"
    assert "P99 755 ms with co-tenants busy vs 351 ms idle" in render(report.explanation)


def test_tail_that_ignores_cotenant_load_is_not_flagged():
    same = [0.3] * 49 + [0.4]
    report = tail_vs_cotenant_load("chat", latencies(same, same), {"code": LOAD}, busy_threshold=1)
    assert report.ratio == pytest.approx(1.0)
    assert report.verdict is InterferenceVerdict.NO_EFFECT
    assert not report.flagged


def test_a_rise_below_the_ratio_threshold_is_not_flagged():
    busy = [0.36] * 49 + [0.46]  # 1.2x the idle tail
    idle = [0.3] * 49 + [0.4]
    report = tail_vs_cotenant_load("chat", latencies(busy, idle), {"code": LOAD}, busy_threshold=1)
    assert report.ratio == pytest.approx(p99(busy) / p99(idle))
    assert report.ratio < 1.25
    assert report.verdict is InterferenceVerdict.NO_EFFECT


def test_too_few_samples_in_a_group_is_insufficient_not_reassuring():
    busy = [0.5] * 49 + [1.0]
    idle = [0.3] * 49 + [0.4]
    report = tail_vs_cotenant_load(
        "chat", latencies(busy, idle), {"code": LOAD}, busy_threshold=1, min_samples=51
    )
    assert report.verdict is InterferenceVerdict.INSUFFICIENT_DATA
    assert not report.flagged


def test_samples_without_a_fresh_cotenant_reading_are_left_out():
    sparse = [(0.0, 5.0), (50 * MINUTE, 0.0)]  # only two readings
    report = tail_vs_cotenant_load(
        "chat",
        latencies([0.5] * 50, [0.3] * 50),
        {"code": sparse},
        busy_threshold=1,
        max_age_s=MINUTE,
    )
    assert report.busy_samples == 1  # minute 0 only
    assert report.idle_samples == 1  # minute 50 only
    assert report.unknown_samples == 98


def test_any_busy_cotenant_makes_the_moment_busy():
    idle_all_along = [(i * MINUTE, 0.0) for i in range(100)]
    report = tail_vs_cotenant_load(
        "chat",
        latencies([0.5] * 50, [0.3] * 50),
        {"code": LOAD, "embed": idle_all_along},
        busy_threshold=1,
    )
    assert (report.busy_samples, report.idle_samples) == (50, 50)


def test_cotenants_are_the_deployments_sharing_any_card():
    placement = {"c0": ["chat", "code"], "c1": ["code", "embed"], "c2": ["solo"]}
    assert cotenants_by_deployment(placement) == {
        "chat": ("code",),
        "code": ("chat", "embed"),
        "embed": ("code",),
        "solo": (),
    }


def test_reports_for_every_deployment_with_cotenants():
    placement = {"c0": ["chat", "code"], "c2": ["solo"]}
    reports = interference_by_deployment(
        {
            "chat": latencies([0.5] * 49 + [1.0], [0.3] * 49 + [0.4]),
            "solo": latencies([0.3] * 50, [0.3] * 50),
        },
        {"code": LOAD},
        placement,
        busy_threshold=1,
    )
    assert [(r.deployment, r.cotenants, r.verdict) for r in reports] == [
        ("chat", ("code",), InterferenceVerdict.TAIL_RISES)
    ]


# The array code against the sample-by-sample loop it replaced, on random series: seconds drawn
# from a small range so that readings tie, go stale (gaps) and repeat a moment, loads on either
# side of the threshold, latencies with ties.
_moments = st.integers(0, 600).map(float)
_load = st.lists(
    st.tuples(_moments, st.sampled_from([0.0, 0.5, 1.0, 2.0]) | st.floats(0, 3)), max_size=30
)


@settings(max_examples=examples(400), deadline=None)  # a shared machine: time is no property here
@given(
    st.lists(st.tuples(_moments, st.sampled_from([0.1, 0.3]) | st.floats(0, 5)), max_size=60),
    st.dictionaries(st.sampled_from("abc"), _load, max_size=3),
    st.sampled_from([0.5, 1.0]) | st.floats(0, 3),
    st.sampled_from([50.0, 95.0, 99.0, 100.0]),
    st.sampled_from([0.0, 30.0, 60.0, 120.0]),
    st.booleans(),
)
def test_the_figures_are_the_sample_by_sample_ones(
    latencies, load, threshold, pct, max_age, as_array
):
    def given_as(samples):
        return np.array(samples, dtype=float).reshape(-1, 2) if as_array else samples

    report = tail_vs_cotenant_load(
        "chat",
        given_as(latencies),
        {name: given_as(samples) for name, samples in load.items()},
        busy_threshold=threshold,
        tail_pct=pct,
        max_age_s=max_age,
    )
    expected = reference.interference_figures(
        latencies, load, busy_threshold=threshold, tail_pct=pct, max_age_s=max_age
    )
    assert reference.report_figures(report) == expected
