import numpy as np
import pytest

from inventory.analytics.series import align_on_common_timestamps, as_of


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
    values, fresh = as_of(
        np.array([(160.0, 2), (100.0, 1)]), np.array([99.0, 100.0, 125.0, 131.0, 170.0]), 30
    )
    # Before the first reading, then fresh, fresh, 31 s old (stale), fresh.
    assert list(fresh) == [False, True, True, False, True]
    assert list(values[fresh]) == [1, 1, 2]


def test_as_of_reads_nothing_without_readings():
    _, fresh = as_of(np.zeros((0, 2)), np.array([1.0, 2.0]), 30)
    assert not fresh.any()
