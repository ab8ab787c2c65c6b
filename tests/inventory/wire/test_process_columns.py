"""A batch's process rows as columns: the checks across rows say what the row by row search
says, and one row per process is the same rows; a batch's cards checked at once pass only
what the card by card search passes."""

from hypothesis import example, given
from hypothesis import strategies as st

from inventory.ingest.events import one_row_per_process
from inventory.wire.columns import ProcessColumns, columns_of
from inventory.wire.schema import (
    _CARD_WITHIN_TOTAL,
    BatchRejected,
    _card_by_card,
    _cards_sound,
    _processes,
    _processes_sound,
)

GIB = 1024**3
# Each total, and just within and just past the tolerance above it.
_EDGES = [edge for total in (40 * GIB, 80 * GIB) for edge in
          (total, int(total * 1.01), int(total * 1.01) + 1)]  # fmt: skip
UUIDS = ["GPU-00000000-0000-4000-8000-000000000000", "GPU-00000000-0000-4000-8000-000000000001"]

# Few cards, PIDs and kinds, so that duplicates are common; memory around a card's total.
_rows = st.lists(
    st.fixed_dictionaries(
        {
            "card_uuid": st.sampled_from([None, "", *UUIDS]),
            "card_index": st.sampled_from([None, 0, 1, 2]),
            "pid": st.integers(1, 3),
            "kind": st.sampled_from([None, "compute", "mps"]),
            "used_bytes_max": st.none() | st.integers(0, 90 * GIB) | st.sampled_from(_EDGES),
            "used_bytes_last": st.none() | st.integers(0, 90 * GIB) | st.sampled_from(_EDGES),
        }
    ),
    max_size=8,
)
_totals = st.dictionaries(
    st.sampled_from([0, 1, 2, *UUIDS]), st.none() | st.sampled_from([40 * GIB, 80 * GIB])
)


@given(rows=_rows, totals=_totals)
@example(  # within the tolerance over its card's total
    rows=[{"card_index": 0, "pid": 1, "used_bytes_max": _EDGES[4], "used_bytes_last": None}],
    totals={0: 80 * GIB},
)
def test_the_column_check_passes_exactly_the_rows_the_row_search_passes(rows, totals):
    try:
        _processes(rows, totals)
        refused = False
    except BatchRejected:
        refused = True
    assert _processes_sound(ProcessColumns.of(rows), totals) is not refused


@given(rows=_rows)
def test_one_per_process_keeps_the_rows_one_row_per_process_keeps(rows):
    rows = [{**row, "name": f"row {position}"} for position, row in enumerate(rows)]
    kept = ProcessColumns.of(rows).one_per_process()
    assert kept == ProcessColumns.of(one_row_per_process(rows))


def test_a_row_without_allocator_statistics_has_none_of_its_figures():
    columns = ProcessColumns.of(
        [
            {"pid": 1, "card_index": 0, "allocator": None},
            {"pid": 2, "card_index": 0, "allocator": {}},
            {"pid": 3, "card_index": 0, "allocator": {"reserved_bytes": 5, "allocated_bytes": 4}},
        ]
    )
    assert columns.reserved_bytes == [None, None, 5]
    assert columns.allocated_bytes == [None, None, 4]
    assert columns.largest_free_block_bytes == [None, None, None]
    assert columns.card == [0, 0, 0]


@given(rows=_rows)
def test_columns_from_the_wire_name_each_rows_card_as_columns_from_rows_do(rows):
    assert ProcessColumns.of_wire(columns_of(rows)).card == ProcessColumns.of(rows).card


_CARD = {"index": 0, "uuid": UUIDS[0], "total_bytes": 80 * GIB,
         **dict.fromkeys(_CARD_WITHIN_TOTAL, 10 * GIB)}  # fmt: skip
# Cards of two sizes, figures left out or None, indexes and UUIDs repeated, figures around
# the smallest card's total.
_cards = st.lists(
    st.fixed_dictionaries(
        {
            "index": st.integers(0, 2),
            "uuid": st.sampled_from([None, "", "GPU-bad", *UUIDS]),
            "total_bytes": st.none() | st.sampled_from([40 * GIB, 80 * GIB]),
        },
        optional={
            key: st.none() | st.integers(0, 90 * GIB) | st.sampled_from(_EDGES)
            for key in _CARD_WITHIN_TOTAL
        },
    ),
    max_size=4,
)


@given(cards=_cards)
@example(cards=[_CARD, {**_CARD, "index": 1, "uuid": UUIDS[1]}])
@example(  # within the larger card's total, not within its own
    cards=[_CARD, {**_CARD, "index": 1, "uuid": UUIDS[1], "total_bytes": 40 * GIB,
                   "used_bytes_last": 60 * GIB}]
)  # fmt: skip
def test_cards_checked_at_once_pass_only_what_the_card_by_card_search_passes(cards):
    if _cards_sound(cards):
        _card_by_card(cards)  # raises nothing


def test_the_cards_of_a_real_host_pass_at_once():
    # Eight cards of one size, every figure there: the check need not go card by card.
    assert _cards_sound([{**_CARD, "index": i, "uuid": f"{UUIDS[0][:-1]}{i}"} for i in range(8)])
    assert not _cards_sound([_CARD, {**_CARD, "index": 1}])  # one UUID twice
    assert not _cards_sound([{**_CARD, "used_bytes_max": None}])
