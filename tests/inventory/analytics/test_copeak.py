from collections import Counter

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from inventory.analytics.copeak import (
    analyse_aligned_copeak,
    analyse_copeak,
    longest_shared_tenancy,
)
from inventory.analytics.reasons import render
from inventory.analytics.units import GiB
from tests.examples import examples
from tests.inventory.analytics import copeak_reference as reference

MINUTE = 60.0


def spiky(spike_at: int, base: float = 10 * GiB, spike: float = 30 * GiB, n: int = 20):
    return [(i * MINUTE, spike if i == spike_at else base) for i in range(n)]


def test_sum_of_p95s_fits_but_the_joint_peak_does_not():
    # Each deployment: 10 GiB, one 30 GiB spike at the same minute. Individually
    # P95 = 10 + 0.05 * (30 - 10) = 11 GiB, so the P95s sum to 22 GiB on a 40 GiB card;
    # together they reach 60 GiB.
    report = analyse_copeak(
        "infer-01:0", {"chat": spiky(7), "code": spiky(7)}, capacity_bytes=40 * GiB
    )
    assert dict(report.individual_p95_bytes) == {
        "chat": pytest.approx(11 * GiB),
        "code": pytest.approx(11 * GiB),
    }
    assert report.sum_of_p95_bytes == pytest.approx(22 * GiB)
    assert report.sum_of_p95_fits
    assert report.joint_peak_bytes == 60 * GiB
    assert not report.joint_peak_fits
    assert report.hidden_collision
    assert report.joint_p50_bytes == 20 * GiB
    # Joint sorted: 19 x 20 GiB then 60 GiB; P99 rank 18.81.
    assert report.joint_p99_bytes == pytest.approx((20 + 0.81 * 40) * GiB)
    # Only the spike is above each one's P90 (10 GiB); both at once in 1 of 20 minutes.
    assert report.copeak_fraction == pytest.approx(1 / 20)
    assert report.oom_risk_fraction == pytest.approx(1 / 20)
    assert report.explanation.params["verdict"].code == "copeak.collides"
    assert "peaks collide" in render(report.explanation)


def test_the_same_demand_at_different_moments_fits():
    report = analyse_copeak(
        "infer-01:0", {"chat": spiky(7), "code": spiky(13)}, capacity_bytes=40 * GiB
    )
    assert report.sum_of_p95_bytes == pytest.approx(22 * GiB)  # unchanged by timing
    assert report.joint_peak_bytes == 40 * GiB  # 30 + 10, never 60
    assert report.copeak_fraction == 0
    assert report.oom_risk_fraction == 0  # 40 GiB is not above 40 GiB
    assert report.joint_peak_fits
    assert not report.hidden_collision


def test_headroom_shrinks_the_usable_capacity():
    report = analyse_copeak(
        "c",
        {"chat": spiky(7), "code": spiky(13)},
        capacity_bytes=40 * GiB,
        headroom_bytes=5 * GiB,
    )
    assert report.usable_bytes == 35 * GiB
    assert report.oom_risk_fraction == pytest.approx(2 / 20)


def test_only_moments_present_in_every_series_count():
    code = [sample for sample in spiky(7) if sample[0] != 3 * MINUTE]
    report = analyse_copeak("c", {"chat": spiky(7), "code": code}, capacity_bytes=80 * GiB)
    assert report.samples == 19


def test_copeak_threshold_counts_deployments_above_their_own_p90():
    series = {"a": spiky(7), "b": spiky(7), "c": spiky(12)}
    two = analyse_copeak("c", series, capacity_bytes=80 * GiB)
    three = analyse_copeak("c", series, capacity_bytes=80 * GiB, min_copeaking=3)
    assert two.copeak_fraction == pytest.approx(1 / 20)
    assert three.copeak_fraction == 0
    with pytest.raises(ValueError):
        analyse_copeak("c", series, capacity_bytes=80 * GiB, min_copeaking=1)


def test_series_without_a_common_moment_are_an_error():
    with pytest.raises(ValueError, match="share no timestamp"):
        analyse_copeak("c", {"a": [(0.0, 1.0)], "b": [(60.0, 1.0)]}, capacity_bytes=10)


# The array code against the plain-Python computation it replaced, on random demand: minutes
# drawn from a small range so that series overlap in part, byte counts or floats.
_values = st.one_of(
    st.lists(st.integers(0, 2**44), min_size=1, max_size=40),
    st.lists(st.floats(0, 1e13, allow_nan=False), min_size=1, max_size=40),
)


@st.composite
def _demand(draw, min_tenants=2, max_tenants=4):
    demand = {}
    for name in draw(
        st.lists(
            st.sampled_from("abcdefg"), min_size=min_tenants, max_size=max_tenants, unique=True
        )
    ):
        minutes = draw(st.lists(st.integers(0, 30), min_size=1, max_size=30, unique=True))
        values = draw(_values)
        demand[name] = [(m * MINUTE, values[i % len(values)]) for i, m in enumerate(minutes)]
    return demand


@settings(max_examples=examples(300), deadline=None)  # a shared machine: time is no property here
@given(
    _demand(),
    st.integers(0, 2**46),
    st.sampled_from([50.0, 90.0, 95.0]),
    st.integers(2, 4),
)
def test_the_figures_are_the_plain_python_ones_to_the_last_bit(demand, capacity, pct, least):
    common = set.intersection(*({at for at, _ in samples} for samples in demand.values()))
    assume(common)
    report = analyse_copeak("c", demand, capacity_bytes=capacity, peak_pct=pct, min_copeaking=least)
    expected = reference.copeak_figures(
        demand, capacity_bytes=capacity, peak_pct=pct, min_copeaking=least
    )
    assert reference.report_figures(report) == expected


def _arrays(samples):
    return np.array([at for at, _ in samples]), np.array([value for _, value in samples])


@settings(max_examples=examples(300), deadline=None)
@given(_demand(min_tenants=1, max_tenants=5))
def test_the_longest_shared_tenancy_is_the_plain_python_one(demand):
    demand = {name: sorted(samples) for name, samples in demand.items()}
    # The old code broke a tie between two sets of tenants by the order rows came in: compare
    # only where one set shared the card longest (or as long and with more tenants).
    present = {}
    for name, samples in demand.items():
        for at, _ in samples:
            present.setdefault(at, set()).add(name)
    periods = Counter(frozenset(names) for names in present.values() if len(names) >= 2)
    keys = sorted(((count, len(names)) for names, count in periods.items()), reverse=True)
    assume(len(keys) < 2 or keys[0] != keys[1])
    shared = longest_shared_tenancy({name: _arrays(samples) for name, samples in demand.items()})
    old = reference.longest_shared_tenancy(demand)
    assert {name: list(values) for name, values in shared.items()} == {
        name: [value for _, value in samples] for name, samples in old.items()
    }
    if old:
        report = analyse_aligned_copeak("c", shared, capacity_bytes=2**45)
        expected = reference.copeak_figures(old, capacity_bytes=2**45)
        assert reference.report_figures(report) == expected


def test_a_tie_goes_to_the_tenants_present_most_recently():
    series = {
        "a": [(0.0, 1), (60.0, 1), (120.0, 1), (180.0, 1)],
        "b": [(0.0, 2), (60.0, 2)],
        "c": [(120.0, 3), (180.0, 3)],
    }
    shared = longest_shared_tenancy({name: _arrays(samples) for name, samples in series.items()})
    assert {name: list(values) for name, values in shared.items()} == {"a": [1, 1], "c": [3, 3]}


def test_more_tenants_than_an_int64_has_bits_still_find_their_shared_moments():
    # 70 deployments one after the other (a week of redeployments), two of them overlapping.
    series = {f"d{i:02d}": _arrays([(i * 120.0, i), (i * 120.0 + 60, i + 1)]) for i in range(70)}
    series["d69"] = _arrays([(60.0, 69)])
    shared = longest_shared_tenancy(series)
    assert {name: list(values) for name, values in shared.items()} == {
        "d00": [1],
        "d69": [69],
    }
