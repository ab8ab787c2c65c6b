from inventory.analytics.snapshot import AllocatorStats, allocator_from_batch, read_allocator_stats
from inventory.analytics.units import GiB


def test_free_figures_read_a_moment_apart_are_capped_at_the_pool_free():
    stats = read_allocator_stats(10 * GiB, 6 * GiB, 5 * GiB, 1 * GiB)
    assert stats == AllocatorStats(10 * GiB, 6 * GiB, 4 * GiB, 1 * GiB)


def test_statistics_that_contradict_themselves_are_no_statistics():
    assert read_allocator_stats(None, 6 * GiB, None, None) is None
    assert read_allocator_stats(6 * GiB, 10 * GiB, None, None) is None
    assert read_allocator_stats(10 * GiB, 6 * GiB, -1, None) is None


def test_a_batch_allocator_object_uses_the_torch_names():
    raw = {"reserved_bytes": 10 * GiB, "allocated_bytes": 6 * GiB, "largest_free_block_bytes": GiB}
    assert allocator_from_batch(raw) == AllocatorStats(10 * GiB, 6 * GiB, None, GiB)
    assert allocator_from_batch(None) is None
