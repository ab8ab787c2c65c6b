import pytest

from inventory.analytics.oom_triage import Confidence, OomCause, OomEvent, triage_oom
from inventory.analytics.snapshot import AllocatorStats, CardSnapshot, ProcessSnapshot
from inventory.analytics.units import GiB, MiB

TOTAL = 80 * GiB
DRIVER = 512 * MiB
USABLE = TOTAL - DRIVER


def card(*processes: ProcessSnapshot, free: int = 400 * MiB) -> CardSnapshot:
    return CardSnapshot("c0", 0.0, TOTAL, DRIVER, TOTAL - DRIVER - free, free, processes)


def chat(reserved=58 * GiB, allocated=58 * GiB - 100 * MiB, split=100 * MiB, largest=50 * MiB):
    return ProcessSnapshot(
        101, "chat", reserved + GiB, AllocatorStats(reserved, allocated, split, largest)
    )


def embed(reserved, allocated, split):
    return ProcessSnapshot(
        202, "embed", reserved + GiB // 2, AllocatorStats(reserved, allocated, split)
    )


def test_true_peak_when_even_compacted_free_memory_is_short():
    # Free on the card 400 MiB + 100 MiB free in chat's pool < 2 GiB requested.
    event = OomEvent(card(chat(), embed(18 * GiB, 18 * GiB, 0)), 2 * GiB, failed_pid=101)
    triage = triage_oom(event)
    assert triage.cause is OomCause.TRUE_PEAK
    assert triage.confidence is Confidence.HIGH
    assert triage.usable_bytes == USABLE
    assert triage.demand_bytes == USABLE - 400 * MiB - 100 * MiB
    assert triage.explanation == (
        "needed 2.0 GiB; card free 0.4 GiB; processes allocated 79.0 GiB of 79.5 GiB usable:"
        " true peak"
    )


def test_allocator_reserve_when_another_process_hoards_releasable_memory():
    # embed holds 6 GiB reserved but unallocated, 1 GiB of it split: 5 GiB releasable.
    hoarder = embed(18 * GiB, 12 * GiB, 1 * GiB)
    triage = triage_oom(OomEvent(card(chat(), hoarder), 2 * GiB, failed_pid=101))
    assert triage.cause is OomCause.ALLOCATOR_RESERVE
    assert triage.releasable_bytes == 5 * GiB  # chat's 100 MiB pool free is all split
    assert triage.pool_free_bytes == 6 * GiB + 100 * MiB
    assert "most by embed pid 202: 5.0 GiB" in triage.explanation
    assert triage.explanation.endswith("allocator reserve")


def test_fragmentation_when_free_bytes_exist_only_as_split_blocks():
    # embed's 6 GiB pool free is all in split segments: nothing can be returned to the card.
    triage = triage_oom(
        OomEvent(card(chat(), embed(18 * GiB, 12 * GiB, 6 * GiB)), 2 * GiB, failed_pid=101)
    )
    assert triage.cause is OomCause.FRAGMENTATION
    assert triage.confidence is Confidence.HIGH
    assert triage.releasable_bytes == 0
    assert triage.largest_free_block_bytes == 50 * MiB  # the failing process's own pool
    assert "largest free block 0.049 GiB" in triage.explanation
    assert triage.explanation.endswith("fragmentation")


def test_unknown_request_size_is_insufficient_data():
    triage = triage_oom(OomEvent(card(chat()), None))
    assert triage.cause is OomCause.INSUFFICIENT_DATA
    assert triage.confidence is Confidence.NONE
    assert "failed allocation size unknown" in triage.caveats


def test_no_allocator_statistics_is_insufficient_data():
    bare = ProcessSnapshot(1, "chat", 79 * GiB)
    triage = triage_oom(OomEvent(card(bare), 2 * GiB))
    assert triage.cause is OomCause.INSUFFICIENT_DATA
    assert "no allocator statistics for any process" in triage.caveats


def test_unknown_card_free_is_insufficient_data():
    snapshot = CardSnapshot("c0", 0.0, TOTAL, DRIVER, None, None, (chat(),))
    assert triage_oom(OomEvent(snapshot, GiB)).cause is OomCause.INSUFFICIENT_DATA


def test_a_snapshot_with_enough_card_free_cannot_show_the_failure():
    triage = triage_oom(OomEvent(card(chat(), free=3 * GiB), 2 * GiB))
    assert triage.cause is OomCause.INSUFFICIENT_DATA
    assert "already covers it" in triage.explanation


def test_a_process_without_allocator_statistics_lowers_confidence():
    unknown = ProcessSnapshot(303, "code", 2 * GiB)
    triage = triage_oom(OomEvent(card(chat(), unknown), 2 * GiB, failed_pid=101))
    assert triage.cause is OomCause.TRUE_PEAK
    assert triage.confidence is Confidence.MEDIUM
    assert any("code pid 303" in caveat for caveat in triage.caveats)


def test_failing_pool_that_had_a_big_enough_block_is_low_confidence():
    roomy = chat(allocated=50 * GiB, split=0, largest=4 * GiB)
    triage = triage_oom(OomEvent(card(roomy), 2 * GiB, failed_pid=101))
    assert triage.confidence is Confidence.LOW


@pytest.mark.parametrize(
    ("request_gib", "cause"),
    [
        (1, OomCause.ALLOCATOR_RESERVE),
        (5, OomCause.ALLOCATOR_RESERVE),  # 0.4 free + 5 releasable >= 5
        (6, OomCause.FRAGMENTATION),  # > 5.4 releasable, <= 0.4 + 6.1 GiB in pools
        (7, OomCause.TRUE_PEAK),  # > 6.5 GiB that compaction could ever free
    ],
)
def test_cause_follows_the_documented_order(request_gib, cause):
    # Card free 0.4 GiB (400 MiB); pools free 0.1 + 6 GiB, of which 5 GiB releasable.
    snapshot = card(chat(), embed(18 * GiB, 12 * GiB, 1 * GiB))
    assert triage_oom(OomEvent(snapshot, request_gib * GiB, failed_pid=101)).cause is cause
