"""Card headroom: what a card's memory could still take after its recent peak.

    headroom = card total - driver reserved - peak used over the window

The window is the caller's (the reports use the last two hours of hourly rollups); negative
means the card peaked above what it can hold. A host's headroom is its best single card's:
a model lands on one card, and the free bytes of two cards do not make room for one model.
"""

from collections.abc import Iterable
from typing import TypeVar

Card = TypeVar("Card")


def card_headroom_bytes(
    total_bytes: int, driver_reserved_bytes: int | None, used_peak_bytes: int | None
) -> int | None:
    """None when nothing was measured in the window: unknown, not zero."""
    if used_peak_bytes is None:
        return None
    return total_bytes - (driver_reserved_bytes or 0) - used_peak_bytes


def largest_headroom(headroom: Iterable[tuple[int | None, Card]]) -> tuple[int, Card] | None:
    """The card with the most headroom, from (headroom, card) pairs; unknowns do not count."""
    known = [(bytes_, card) for bytes_, card in headroom if bytes_ is not None]
    return max(known, key=lambda pair: pair[0], default=None)
