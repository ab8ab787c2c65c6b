import pytest

from inventory.analytics.series import AsOf, align_on_common_timestamps


def test_alignment_keeps_only_moments_every_series_has():
    timestamps, values = align_on_common_timestamps(
        {"a": [(3.0, 30), (1.0, 10), (2.0, 20)], "b": [(2.0, 200), (3.0, 300), (4.0, 400)]}
    )
    assert timestamps == (2.0, 3.0)
    assert values == {"a": (20, 30), "b": (200, 300)}


def test_alignment_rejects_duplicate_timestamps():
    with pytest.raises(ValueError, match="duplicate"):
        align_on_common_timestamps({"a": [(1.0, 1), (1.0, 2)]})


def test_as_of_returns_the_latest_fresh_reading():
    lookup = AsOf([(100.0, 1), (160.0, 2)], max_age_s=30)
    assert lookup(99.0) is None  # before the first reading
    assert lookup(100.0) == 1
    assert lookup(125.0) == 1
    assert lookup(131.0) is None  # 31 s old: stale
    assert lookup(170.0) == 2
