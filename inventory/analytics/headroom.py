"""Headroom: what a new model could still take, per card and per host.

Card headroom = total - driver reserved - demand (P95 or peak of the card's history) - peak
fragmentation, rounded down to whole bytes; negative means the card is already overcommitted.
Demand must exclude fragmented bytes (e.g. allocated bytes plus non-allocator memory, or used
minus inactive split): fragmentation is subtracted on its own, at its peak, because bytes
stuck in split blocks are lost to a newcomer whatever the demand.

Host headroom is the largest single card's headroom: a model lands on a card, and the free
bytes of two cards do not make room for one model. The per-card sum is offered only as
``total_not_placeable_bytes``, named so that nobody mistakes it for space.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from inventory.analytics.stats import percentile


class DemandBasis(StrEnum):
    P95 = "p95"
    PEAK = "peak"


@dataclass(frozen=True)
class CardDemandHistory:
    card_id: str
    total_bytes: int
    driver_reserved_bytes: int
    demand_bytes: tuple[float, ...]
    fragmentation_bytes: tuple[float, ...] = ()


@dataclass(frozen=True)
class CardHeadroom:
    card_id: str
    total_bytes: int
    driver_reserved_bytes: int
    demand_basis: DemandBasis
    demand_bytes: float
    fragmentation_peak_bytes: float
    headroom_bytes: int

    @property
    def placeable_bytes(self) -> int:
        return max(self.headroom_bytes, 0)


@dataclass(frozen=True)
class HostHeadroom:
    host: str
    # Largest headroom first.
    cards: tuple[CardHeadroom, ...]

    @property
    def largest_card(self) -> CardHeadroom | None:
        return self.cards[0] if self.cards else None

    @property
    def placeable_bytes(self) -> int:
        """The biggest model (in bytes) that fits on one card of this host."""
        return self.cards[0].placeable_bytes if self.cards else 0

    @property
    def total_not_placeable_bytes(self) -> int:
        """Sum of per-card headroom: spread over cards, so not room for any single model."""
        return sum(card.placeable_bytes for card in self.cards)


def card_headroom(
    history: CardDemandHistory, *, basis: DemandBasis = DemandBasis.P95
) -> CardHeadroom:
    demand = (
        percentile(history.demand_bytes, 95)
        if basis is DemandBasis.P95
        else max(history.demand_bytes)
    )
    fragmentation_peak = max(history.fragmentation_bytes, default=0.0)
    headroom = math.floor(
        history.total_bytes - history.driver_reserved_bytes - demand - fragmentation_peak
    )
    return CardHeadroom(
        card_id=history.card_id,
        total_bytes=history.total_bytes,
        driver_reserved_bytes=history.driver_reserved_bytes,
        demand_basis=basis,
        demand_bytes=demand,
        fragmentation_peak_bytes=fragmentation_peak,
        headroom_bytes=headroom,
    )


def host_headroom(
    host: str,
    histories: Sequence[CardDemandHistory],
    *,
    basis: DemandBasis = DemandBasis.P95,
) -> HostHeadroom:
    cards = sorted(
        (card_headroom(history, basis=basis) for history in histories),
        key=lambda card: (-card.headroom_bytes, card.card_id),
    )
    return HostHeadroom(host, tuple(cards))
