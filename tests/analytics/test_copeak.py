import pytest

from console.reasons import render
from inventory.analytics.copeak import analyse_copeak
from inventory.analytics.units import GiB

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
