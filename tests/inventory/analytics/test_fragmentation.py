import pytest
from hypothesis import given
from hypothesis import strategies as st

from inventory.analytics.fragmentation import (
    Status,
    Thresholds,
    card_status,
    fragmentation_index,
    index_from_columns,
    worst_status,
)
from inventory.analytics.snapshot import (
    AllocatorStats,
    CardSnapshot,
    ProcessSnapshot,
    allocator_from_batch,
)
from inventory.analytics.units import GiB


def test_index_from_largest_free_block_is_the_unusable_share_of_pool_free():
    stats = AllocatorStats(10 * GiB, 6 * GiB, largest_free_block_bytes=1 * GiB)
    index = fragmentation_index(stats)
    assert index is not None
    assert index.value == pytest.approx(1 - 1 / 4)  # 4 GiB free in the pool, best block 1
    assert "largest free block" in index.method


def test_index_falls_back_to_inactive_split_over_reserved():
    index = fragmentation_index(AllocatorStats(10 * GiB, 6 * GiB, inactive_split_bytes=2 * GiB))
    assert index is not None
    assert index.value == pytest.approx(0.2)
    assert "inactive split" in index.method


def test_index_unknown_without_either_statistic_and_zero_for_a_full_pool():
    assert fragmentation_index(AllocatorStats(10 * GiB, 6 * GiB)) is None
    full = AllocatorStats(10 * GiB, 10 * GiB, largest_free_block_bytes=0)
    assert fragmentation_index(full).value == 0.0


@pytest.mark.parametrize(
    ("value", "status"),
    [(0.29, Status.GREEN), (0.3, Status.AMBER), (0.49, Status.AMBER), (0.5, Status.RED)],
)
def test_default_style_thresholds(value, status):
    assert Thresholds(amber=0.3, red=0.5).classify(value) is status


def test_thresholds_must_be_ordered():
    with pytest.raises(ValueError):
        Thresholds(amber=0.6, red=0.5)


def test_worst_status_orders_by_severity_not_name():
    assert worst_status([Status.AMBER, Status.RED, Status.GREEN]) is Status.RED
    assert worst_status([Status.GREEN, Status.AMBER]) is Status.AMBER
    assert worst_status([]) is Status.GREEN


def _card(*processes: ProcessSnapshot, used: int = 40 * GiB) -> CardSnapshot:
    reserved = GiB // 2
    return CardSnapshot("c0", 0.0, 80 * GiB, reserved, used, 80 * GiB - reserved - used, processes)


def test_totals_green_with_fragmentation_red_is_shown_red():
    hoarder = ProcessSnapshot(
        4242,
        "chat",
        30 * GiB,
        AllocatorStats(30 * GiB, 20 * GiB, largest_free_block_bytes=2 * GiB),
    )
    status = card_status(_card(hoarder))
    # 40.5 of 80 GiB used (51%) is green; the pool's best block is 2 of 10 GiB free: 0.8.
    assert status.totals_status is Status.GREEN
    assert status.fragmentation_status is Status.RED
    assert status.status is Status.RED
    assert status.worst_fragmentation.index.value == pytest.approx(0.8)
    assert status.used_fraction == pytest.approx(40.5 / 80)
    assert "totals green" in status.reason
    assert "fragmentation red" in status.reason
    assert "chat pid 4242" in status.reason
    assert "do not add a model" in status.reason


def test_red_totals_stay_red_with_tidy_pools():
    tidy = ProcessSnapshot(1, "chat", 75 * GiB, AllocatorStats(70 * GiB, 70 * GiB, 0, 0))
    status = card_status(_card(tidy, used=75 * GiB))
    assert status.totals_status is Status.RED
    assert status.fragmentation_status is Status.GREEN
    assert status.status is Status.RED
    assert "shown as" not in status.reason


def test_without_allocator_statistics_fragmentation_is_unknown_not_green():
    status = card_status(_card(ProcessSnapshot(1, "chat", 40 * GiB)))
    assert status.fragmentation_status is None
    assert status.status is Status.GREEN
    assert "fragmentation unknown" in status.reason


def test_card_thresholds_are_parameters():
    status = card_status(
        _card(used=40 * GiB), usage_thresholds=Thresholds(amber=0.4, red=0.5)
    )  # 40.5 / 80 = 0.506
    assert status.status is Status.RED


_figure = st.one_of(st.none(), st.integers(min_value=-(2**40), max_value=2**40))


@given(
    reserved=_figure,
    allocated=_figure,
    inactive_split=_figure,
    largest_free=_figure,
)
def test_ingest_reads_the_index_of_a_batch_as_the_pages_do(
    reserved, allocated, inactive_split, largest_free
):
    raw = {
        "reserved_bytes": reserved,
        "allocated_bytes": allocated,
        "inactive_split_bytes": inactive_split,
        "largest_free_block_bytes": largest_free,
    }
    stats = allocator_from_batch(raw)
    index = fragmentation_index(stats) if stats else None
    [ingested] = index_from_columns([reserved], [allocated], [inactive_split], [largest_free])
    assert ingested == (None if index is None else index.value)


@given(
    st.lists(st.tuples(_figure, _figure, _figure, _figure), max_size=6),
    st.integers(min_value=0, max_value=2**40),
)
def test_a_batchs_columns_get_each_rows_index(rows, reserved):
    # Rows as PyTorch reports them most of the time (every figure there), one whose largest
    # block is reported above the pool's free bytes, and odd ones mixed in.
    rows += [
        (reserved, reserved // 2, 0, reserved // 4),
        (reserved, reserved // 2, 0, reserved),
        (reserved, reserved, None, 0),
    ]
    sound = [row for row in rows if _as_the_pages_read(*row) is not None and None not in row]
    # A batch with an odd row anywhere, and one whose every row has all four figures.
    for batch in (rows, sound):
        columns = [list(column) for column in zip(*batch, strict=True)] or [[], [], [], []]
        assert index_from_columns(*columns) == [_as_the_pages_read(*row) for row in batch]


def _as_the_pages_read(reserved, allocated, inactive_split, largest_free):
    stats = allocator_from_batch({
        "reserved_bytes": reserved, "allocated_bytes": allocated,
        "inactive_split_bytes": inactive_split, "largest_free_block_bytes": largest_free,
    })  # fmt: skip
    index = fragmentation_index(stats) if stats else None
    return None if index is None else index.value


def test_one_spike_in_a_week_is_not_a_sustained_red():
    from inventory.analytics.fragmentation import sustained_fragmentation

    gib = 1024**3
    week = [(0.1, 4 * gib)] * 999 + [(0.9, 4 * gib)]
    assert sustained_fragmentation(week, share=0.1, min_free_bytes=gib).index == pytest.approx(0.1)
    # Red for a fifth of the time: the index held for a tenth of it is red.
    stayed = [(0.1, 4 * gib)] * 800 + [(0.7, 4 * gib)] * 200
    assert sustained_fragmentation(stayed, share=0.1, min_free_bytes=gib).index == pytest.approx(
        0.7
    )


def test_a_tiny_pool_does_not_flip_the_index():
    from inventory.analytics.fragmentation import sustained_fragmentation

    # 8 MiB free in one odd block: index near 1, but the pool is too small to matter.
    moments = [(0.99, 8 * 1024**2)] * 50 + [(0.05, 2 * 1024**3)] * 50
    result = sustained_fragmentation(moments, share=0.1, min_free_bytes=1024**3)
    assert result.index == pytest.approx(0.05)
    assert (result.counted, result.ignored) == (50, 50)
    assert sustained_fragmentation(moments[:50], share=0.1, min_free_bytes=1024**3).index is None
