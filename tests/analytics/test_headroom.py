import pytest

from inventory.analytics.headroom import (
    CardDemandHistory,
    DemandBasis,
    card_headroom,
    host_headroom,
)
from inventory.analytics.units import GiB

# Demand 1..20 GiB: P95 = 19 + 0.05 = 19.05 GiB, peak 20 GiB; fragmentation peaks at 2 GiB.
HISTORY = CardDemandHistory(
    "infer-01:0",
    total_bytes=80 * GiB,
    driver_reserved_bytes=GiB // 2,
    demand_bytes=tuple(float(g * GiB) for g in range(1, 21)),
    fragmentation_bytes=(0.5 * GiB, 2.0 * GiB, 1.0 * GiB),
)


def test_card_headroom_subtracts_reserve_p95_demand_and_fragmentation_peak():
    card = card_headroom(HISTORY)
    assert card.demand_bytes == pytest.approx(19.05 * GiB)
    assert card.fragmentation_peak_bytes == 2 * GiB
    assert card.headroom_bytes == pytest.approx((80 - 0.5 - 19.05 - 2) * GiB, abs=1)


def test_peak_basis_uses_the_largest_demand():
    card = card_headroom(HISTORY, basis=DemandBasis.PEAK)
    assert card.headroom_bytes == int((80 - 0.5 - 20 - 2) * GiB)


def test_overcommitted_card_has_negative_headroom_and_nothing_placeable():
    full = CardDemandHistory("c", 80 * GiB, 0, (85.0 * GiB,))
    card = card_headroom(full)
    assert card.headroom_bytes == -5 * GiB
    assert card.placeable_bytes == 0


def _card(card_id: str, demand_gib: float) -> CardDemandHistory:
    return CardDemandHistory(card_id, 80 * GiB, 0, (demand_gib * GiB,))


def test_host_headroom_is_the_best_single_card_never_the_sum():
    host = host_headroom("infer-01", [_card("c0", 55), _card("c1", 50), _card("c2", 90)])
    assert [card.card_id for card in host.cards] == ["c1", "c0", "c2"]
    assert host.largest_card.card_id == "c1"
    assert host.placeable_bytes == 30 * GiB
    # 30 + 25 GiB spread over two cards, the overcommitted third adding nothing.
    assert host.total_not_placeable_bytes == 55 * GiB
    # A 40 GiB model does not fit although the per-card sum exceeds it.
    assert host.placeable_bytes < 40 * GiB < host.total_not_placeable_bytes


def test_host_without_cards_has_no_headroom():
    host = host_headroom("empty", [])
    assert host.largest_card is None
    assert host.placeable_bytes == 0
