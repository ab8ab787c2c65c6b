"""Fragmentation per process, per deployment and per card, and the card status it feeds.

The allocator's statistics are the truth here, not nvidia-smi: a card can show plenty of free
memory while a process's pool is cut into blocks too small for the next allocation.

Index (0 = none, 1 = all free memory in useless crumbs), by the best statistic available:

- ``1 - largest_free_block / (reserved - allocated)`` when the largest free block is known:
  the share of the pool's free bytes that the biggest possible allocation cannot use;
- ``inactive_split_bytes / reserved`` otherwise: the share of the pool stuck in partly used
  segments, which cannot be returned to the card.

Default thresholds: amber from 0.3, red from 0.5 (a red pool cannot place an allocation of
half its free bytes). Card totals: amber from 80% of the card used (driver reserve counted as
used), red from 90%.
"""

import operator
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from inventory.analytics.ledger import build_ledger
from inventory.analytics.snapshot import AllocatorStats, CardSnapshot, process_label
from inventory.analytics.stats import percentile
from inventory.analytics.units import format_gib


class Status(StrEnum):
    GREEN = "green"
    AMBER = "amber"
    RED = "red"


_SEVERITY = {Status.GREEN: 0, Status.AMBER: 1, Status.RED: 2}


def worst_status(statuses: Iterable[Status]) -> Status:
    return max(statuses, key=_SEVERITY.__getitem__, default=Status.GREEN)


@dataclass(frozen=True)
class Thresholds:
    """Values at or above ``amber`` are amber, at or above ``red`` are red."""

    amber: float
    red: float

    def __post_init__(self) -> None:
        if not 0 <= self.amber <= self.red:
            raise ValueError(f"need 0 <= amber <= red, got {self.amber}, {self.red}")

    def classify(self, value: float) -> Status:
        if value >= self.red:
            return Status.RED
        if value >= self.amber:
            return Status.AMBER
        return Status.GREEN


FRAGMENTATION_THRESHOLDS = Thresholds(amber=0.3, red=0.5)
USAGE_THRESHOLDS = Thresholds(amber=0.80, red=0.90)


@dataclass(frozen=True)
class FragmentationIndex:
    value: float
    method: str


LARGEST_FREE_METHOD = "1 - largest free block / free in pool"
INACTIVE_SPLIT_METHOD = "inactive split / reserved"


def fragmentation_index(stats: AllocatorStats) -> FragmentationIndex | None:
    """The process's index, or ``None`` when its allocator exposes neither statistic."""
    value = _index_value(
        stats.reserved_bytes,
        stats.pool_free_bytes,
        stats.inactive_split_bytes,
        stats.largest_free_block_bytes,
    )
    if value is None:
        return None
    method = (
        LARGEST_FREE_METHOD if stats.largest_free_block_bytes is not None else INACTIVE_SPLIT_METHOD
    )
    return FragmentationIndex(value, method)


def index_from_columns(
    reserved: list, allocated: list, inactive_split: list, largest_free: list
) -> list[float | None]:
    """The index of each process row of a batch, from its allocator figures as columns
    (inventory.wire.columns), as ``fragmentation_index`` of
    ``allocator_from_batch`` reads it, without building either object: ingest computes it for
    every row it writes."""
    if _all_sound(reserved, allocated, inactive_split, largest_free):
        # Every row has its largest free block (PyTorch's figures): one expression a row.
        return [
            0.0 if held == taken else 1 - min(largest, held - taken) / (held - taken)
            for held, taken, largest in zip(reserved, allocated, largest_free, strict=True)
        ]
    return list(map(_index_of_figures, reserved, allocated, inactive_split, largest_free))


def _all_sound(reserved: list, allocated: list, inactive_split: list, largest_free: list) -> bool:
    """Whether every row has reserved, allocated and largest free block, none negative nor
    more allocated than reserved, and no negative inactive split: asked of whole columns."""
    if not reserved or None in reserved or None in allocated or None in largest_free:
        return False
    if min(allocated) < 0 or min(largest_free) < 0:
        return False
    if any(map(operator.gt, allocated, reserved)):
        return False
    if None in inactive_split:  # PyTorch's figures leave it out at times
        inactive_split = [split for split in inactive_split if split is not None]
    return not inactive_split or min(inactive_split) >= 0


def _index_of_figures(
    reserved: int | None,
    allocated: int | None,
    inactive_split: int | None,
    largest_free: int | None,
) -> float | None:
    if reserved is None or allocated is None or allocated > reserved or allocated < 0:
        return None
    if (inactive_split is not None and inactive_split < 0) or (
        largest_free is not None and largest_free < 0
    ):
        return None
    pool_free = reserved - allocated
    return _index_value(
        reserved,
        pool_free,
        None if inactive_split is None else min(inactive_split, pool_free),
        None if largest_free is None else min(largest_free, pool_free),
    )


def _index_value(
    reserved: int, pool_free: int, inactive_split: int | None, largest_free: int | None
) -> float | None:
    if largest_free is not None:
        return 0.0 if pool_free == 0 else 1 - largest_free / pool_free
    if inactive_split is not None:
        return 0.0 if reserved == 0 else inactive_split / reserved
    return None


@dataclass(frozen=True)
class ProcessFragmentation:
    deployment: str | None
    pid: int | None
    index: FragmentationIndex
    status: Status

    @property
    def label(self) -> str:
        return process_label(self.deployment, self.pid)


def process_fragmentation(
    snapshot: CardSnapshot, thresholds: Thresholds = FRAGMENTATION_THRESHOLDS
) -> tuple[ProcessFragmentation, ...]:
    """Every process on the card whose allocator statistics allow an index."""
    readings = []
    for process in snapshot.processes:
        index = fragmentation_index(process.allocator) if process.allocator else None
        if index is not None:
            readings.append(
                ProcessFragmentation(
                    process.deployment, process.pid, index, thresholds.classify(index.value)
                )
            )
    return tuple(readings)


@dataclass(frozen=True)
class CardStatus:
    card_id: str
    status: Status
    totals_status: Status
    used_fraction: float
    # None when no process on the card exposes allocator statistics.
    fragmentation_status: Status | None
    worst_fragmentation: ProcessFragmentation | None
    reason: str


def card_status(
    snapshot: CardSnapshot,
    *,
    usage_thresholds: Thresholds = USAGE_THRESHOLDS,
    fragmentation_thresholds: Thresholds = FRAGMENTATION_THRESHOLDS,
) -> CardStatus:
    """The card's status: the worse of its totals and its most fragmented process.

    Pools are per process, so the card's fragmentation is its worst process's, not an average:
    one red pool is enough to make the next allocation in it fail.
    """
    total = snapshot.total_bytes
    used_fraction = 0.0 if total == 0 else 1 - build_ledger(snapshot).free_bytes / total
    totals = usage_thresholds.classify(used_fraction)
    readings = process_fragmentation(snapshot, fragmentation_thresholds)
    worst = max(readings, key=lambda r: r.index.value, default=None)
    fragmentation = worst.status if worst else None
    status = worst_status([totals, *([fragmentation] if fragmentation else [])])

    reason = f"totals {totals} ({used_fraction:.0%} of {format_gib(total)} used)"
    if worst is None:
        reason += "; fragmentation unknown (no allocator statistics)"
    else:
        reason += (
            f"; fragmentation {worst.status} (index {worst.index.value:.2f} in {worst.label},"
            f" {worst.index.method})"
        )
    if status is not totals:
        reason += f": shown as {status}"
        if status is Status.RED:
            reason += ", do not add a model"
    return CardStatus(snapshot.card_id, status, totals, used_fraction, fragmentation, worst, reason)


# Scales of the card-level index, by the statistic behind it (a code each, for display).
SCALE_LARGEST_BLOCK = "largest_free_block"
SCALE_INACTIVE_SPLIT = "inactive_split_over_reserved"


@dataclass(frozen=True)
class SustainedFragmentation:
    """How fragmented a card stayed, not how fragmented it once was."""

    index: float | None  # exceeded in ``share`` of the counted moments; None: none counted
    counted: int  # moments whose pools held at least the free-bytes floor
    ignored: int  # moments below the floor: a tiny pool's index says nothing


def sustained_fragmentation(
    moments: Iterable[tuple[float, int]], *, share: float, min_free_bytes: int
) -> SustainedFragmentation:
    """The fragmentation index a card held for at least ``share`` of the time.

    ``moments`` are (worst index, bytes held free in the allocators' pools) per sample time.
    One spike in seven days must not block a card, and a pool with a few MiB free flips the
    index to 1 on a single odd block: only moments with at least ``min_free_bytes`` held free
    count, and the figure is the ``1 - share`` quantile of their indices (share 0.1: the index
    the card was at or above for a tenth of the counted time).
    """
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share}")
    counted, ignored = [], 0
    for index, free in moments:
        if free >= min_free_bytes:
            counted.append(index)
        else:
            ignored += 1
    if not counted:
        return SustainedFragmentation(None, 0, ignored)
    return SustainedFragmentation(percentile(counted, 100 * (1 - share)), len(counted), ignored)
