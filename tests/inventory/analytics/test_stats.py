import math
import statistics

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inventory.analytics.stats import (
    count_array_excursions,
    count_exceedances,
    count_excursions,
    histogram_quantile,
    mean,
    percentile,
)

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False)


def test_p95_of_twenty_values_interpolates_between_the_two_largest():
    values = list(range(20, 0, -1))  # unsorted on purpose: 20..1
    # rank = 19 * 0.95 = 18.05 -> x[18] + 0.05 * (x[19] - x[18]) = 19 + 0.05
    assert percentile(values, 95) == pytest.approx(19.05)


def test_median_of_even_count_is_midpoint_and_extremes_are_min_and_max():
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert percentile([4, 1, 3, 2], 0) == 1
    assert percentile([4, 1, 3, 2], 100) == 4
    assert percentile([7.5], 99) == 7.5


@pytest.mark.parametrize("pct", [-1, 100.5])
def test_percentile_rejects_out_of_range(pct):
    with pytest.raises(ValueError):
        percentile([1, 2], pct)


def test_statistics_of_nothing_raise():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        mean([])


@given(st.lists(finite, min_size=2, max_size=50), st.integers(min_value=1, max_value=99))
def test_percentile_matches_the_inclusive_quantile_definition(values, pct):
    # statistics.quantiles(method="inclusive") is the same type-7 definition, computed apart.
    cut_points = statistics.quantiles(values, n=100, method="inclusive")
    assert percentile(values, pct) == pytest.approx(cut_points[pct - 1], rel=1e-9, abs=1e-6)


@given(st.lists(finite, min_size=1, max_size=50), st.floats(0, 100), st.floats(0, 100))
def test_percentile_is_bounded_and_monotone(values, a, b):
    low, high = sorted((a, b))
    assert min(values) <= percentile(values, low) <= percentile(values, high) <= max(values)


def test_mean():
    assert mean([1, 2, 3, 10]) == 4


def test_exceedances_count_samples_but_excursions_count_runs():
    values = [1, 5, 5, 2, 6, 4]
    assert count_exceedances(values, 4) == 3  # 5, 5, 6; 4 itself is not above
    assert count_excursions(values, 4) == 2  # [5, 5] and [6]
    assert count_excursions([5, 5, 5], 4) == 1
    assert count_excursions([], 4) == 0


BUCKETS = [(0.1, 10), (0.5, 60), (1.0, 90), (math.inf, 100)]


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.05, 0.1 * 5 / 10),  # rank 5 in the first bucket, lower bound 0
        (0.5, 0.1 + 0.4 * (50 - 10) / (60 - 10)),  # rank 50 in (0.1, 0.5]
        (0.9, 1.0),  # rank 90 is the top of (0.5, 1.0]
        (0.95, 1.0),  # rank 95 in +Inf: the highest finite bound
    ],
)
def test_histogram_quantile_interpolates_like_promql(q, expected):
    assert histogram_quantile(q, BUCKETS) == pytest.approx(expected)


def test_histogram_quantile_accepts_buckets_in_any_order():
    assert histogram_quantile(0.5, list(reversed(BUCKETS))) == pytest.approx(0.42)


@pytest.mark.parametrize(
    "buckets",
    [
        [(0.1, 10), (0.5, 60)],  # no +Inf bucket
        [(math.inf, 10)],  # no finite bucket
        [(0.1, 10), (0.5, 5), (math.inf, 20)],  # decreasing cumulative count
        [(0.1, 0), (math.inf, 0)],  # no observations
    ],
)
def test_histogram_quantile_rejects_malformed_histograms(buckets):
    with pytest.raises(ValueError):
        histogram_quantile(0.5, buckets)


@given(st.lists(st.integers(0, 50), min_size=3, max_size=3), st.floats(0, 1), st.floats(0, 1))
def test_histogram_quantile_is_monotone_in_q(increments, a, b):
    counts = [sum(increments[: i + 1]) for i in range(3)]
    if counts[-1] == 0:
        counts[-1] = 1
    buckets = [(0.25, counts[0]), (1.0, counts[1]), (math.inf, counts[2])]
    low, high = sorted((a, b))
    assert histogram_quantile(low, buckets) <= histogram_quantile(high, buckets)


@given(st.lists(st.sampled_from((0.0, 3.5, 4.0, 4.5, 9.0))), st.sampled_from((0.0, 4, 4.5)))
def test_the_excursions_of_an_array_are_the_excursions_of_its_values(values, threshold):
    # Runs at the start and the end, ties at the threshold, nothing at all.
    assert count_array_excursions(np.array(values), threshold) == count_excursions(
        values, threshold
    )
