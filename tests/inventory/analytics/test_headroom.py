from inventory.analytics.headroom import card_headroom_bytes, largest_headroom
from inventory.analytics.units import GiB


def test_headroom_is_total_less_driver_reserve_less_peak_use():
    assert card_headroom_bytes(80 * GiB, GiB // 2, 60 * GiB) == 80 * GiB - GiB // 2 - 60 * GiB


def test_a_card_that_peaked_above_its_memory_has_negative_headroom():
    assert card_headroom_bytes(80 * GiB, GiB, 85 * GiB) == -6 * GiB


def test_without_a_measured_peak_headroom_is_unknown_not_the_whole_card():
    assert card_headroom_bytes(80 * GiB, None, None) is None
    assert card_headroom_bytes(80 * GiB, None, 10 * GiB) == 70 * GiB


def test_host_headroom_is_the_best_single_card_never_the_sum():
    best = largest_headroom([(5 * GiB, "card 0"), (None, "card 1"), (30 * GiB, "card 2")])
    assert best == (30 * GiB, "card 2")
    assert largest_headroom([(None, "card 0")]) is None
