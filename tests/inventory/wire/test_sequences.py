"""The gaps in each sampler's sequence, whatever order its batches come in."""

from hypothesis import given
from hypothesis import strategies as st

from inventory.wire import sequences


@given(
    batches=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 30)), unique=True, max_size=40
    ),
    order=st.randoms(use_true_random=False),
)
def test_the_gaps_are_those_of_each_samplers_range_in_any_order(batches, order):
    shuffled = list(batches)
    order.shuffle(shuffled)
    record: dict = {}
    for sampler, seq in shuffled:
        sequences.record(record, sampler, seq, end=float(seq))
    expected = 0
    for sampler in {sampler for sampler, _ in batches}:
        seqs = [seq for name, seq in batches if name == sampler]
        expected += max(seqs) - min(seqs) + 1 - len(seqs)
    assert sequences.missing(record) == expected


def test_beyond_the_samplers_kept_the_least_recently_heard_of_keeps_its_gaps_counted():
    record: dict = {}
    sequences.record(record, "first", 1, end=0.0)
    sequences.record(record, "first", 4, end=1.0)  # 2 and 3 missing
    for n in range(sequences.KEPT):
        sequences.record(record, f"later-{n}", 1, end=10.0 + n)
    assert "first" not in record["samplers"]
    assert len(record["samplers"]) == sequences.KEPT
    assert sequences.missing(record) == 2
