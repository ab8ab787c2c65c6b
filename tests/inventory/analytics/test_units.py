from inventory.analytics.units import GiB, MiB, format_gib, format_ms


def test_gib_keeps_one_decimal_and_small_amounts_stay_visible():
    assert format_gib(2 * GiB) == "2.0 GiB"
    assert format_gib(400 * MiB) == "0.4 GiB"
    assert format_gib(50 * MiB) == "0.049 GiB"
    assert format_gib(0) == "0.0 GiB"


def test_ms():
    assert format_ms(0.3204) == "320 ms"
