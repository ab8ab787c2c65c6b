from hypothesis import given
from hypothesis import strategies as st

from inventory.analytics.ledger import CardLedger, LedgerLine, LineKind, build_ledger
from inventory.analytics.snapshot import (
    AllocatorStats,
    Basis,
    CardSnapshot,
    DeploymentSpec,
    EngineKvCache,
    ProcessSnapshot,
    snapshot_at,
)
from inventory.analytics.units import GiB, MiB

M = Basis.MEASURED
E = Basis.ESTIMATED


def summary(ledger: CardLedger) -> dict[tuple[LineKind, str | None], tuple[int, Basis]]:
    """(kind, deployment) -> (bytes, basis); every key must occur once in these examples."""
    table: dict[tuple[LineKind, str | None], tuple[int, Basis]] = {}
    for line in ledger.lines:
        key = (line.kind, line.deployment)
        assert key not in table, key
        table[key] = (line.bytes, line.basis)
    return table


def test_every_source_present_gives_a_line_per_component_summing_to_the_total():
    chat = ProcessSnapshot(
        pid=100,
        deployment="chat",
        used_bytes=60_000 * MiB,
        allocator=AllocatorStats(
            reserved_bytes=57_000 * MiB,
            allocated_bytes=50_000 * MiB,
            inactive_split_bytes=2_000 * MiB,
        ),
        kv_cache=EngineKvCache(pool_bytes=16_000 * MiB, usage_fraction=0.25),
        spec=DeploymentSpec(
            weights_bytes=30_000 * MiB, cuda_graph_bytes=1_000 * MiB, nccl_bytes=1_500 * MiB
        ),
    )
    embed = ProcessSnapshot(
        pid=200,
        deployment="embed",
        used_bytes=9_000 * MiB,
        spec=DeploymentSpec(
            weights_bytes=5_000 * MiB, kv_reservation_bytes=3_000 * MiB, workspace_bytes=500 * MiB
        ),
    )
    snapshot = CardSnapshot(
        card_id="infer-01:0",
        at=1_700_000_000.0,
        total_bytes=81_559 * MiB,
        driver_reserved_bytes=559 * MiB,
        used_bytes=70_000 * MiB,
        free_bytes=11_000 * MiB,
        processes=(chat, embed),
    )

    ledger = build_ledger(snapshot)

    assert sum(line.bytes for line in ledger.lines) == snapshot.total_bytes
    assert ledger.notes == ()
    expected = {
        (LineKind.DRIVER_RESERVED, None): (559, M),
        # chat: footprint 60,000 = pool 57,000 + NCCL 1,500 + CUDA context 1,500.
        # pool 57,000 = fragmentation 2,000 + reserve (57,000 - 50,000 - 2,000) + allocated.
        # allocated 50,000 = KV 16,000 (25% used) + weights 30,000 + graphs 1,000 + workspace.
        (LineKind.KV_CACHE_USED, "chat"): (4_000, M),
        (LineKind.KV_CACHE_UNUSED, "chat"): (12_000, M),
        (LineKind.MODEL_WEIGHTS, "chat"): (30_000, E),
        (LineKind.CUDA_GRAPHS, "chat"): (1_000, E),
        (LineKind.WORKSPACE, "chat"): (3_000, E),
        (LineKind.FRAGMENTATION, "chat"): (2_000, M),
        (LineKind.ALLOCATOR_RESERVE, "chat"): (5_000, M),
        (LineKind.COMMUNICATION, "chat"): (1_500, E),
        (LineKind.CUDA_CONTEXT, "chat"): (1_500, E),
        # embed: no allocator stats, so spec components inside NVML's 9,000 and the rest.
        (LineKind.MODEL_WEIGHTS, "embed"): (5_000, E),
        (LineKind.KV_CACHE_USE_UNKNOWN, "embed"): (3_000, E),
        (LineKind.WORKSPACE, "embed"): (500, E),
        (LineKind.UNATTRIBUTED, "embed"): (500, E),
        # Card: used 70,000 - footprints 69,000, all measured; free is NVML's.
        (LineKind.UNATTRIBUTED, None): (1_000, M),
        (LineKind.FREE, None): (11_000, M),
    }
    assert summary(ledger) == {key: (mib * MiB, basis) for key, (mib, basis) in expected.items()}
    assert {line.pid for line in ledger.lines_for("chat")} == {100}
    assert ledger.free_bytes == 11_000 * MiB


def test_nvidia_smi_rounding_is_absorbed_by_free_and_noted():
    # Real H200 capture: 143771 MiB total, 614 reserved, 0 used, 143158 free (sums to 143772).
    snapshot = CardSnapshot(
        "h200:0",
        0.0,
        total_bytes=143_771 * MiB,
        driver_reserved_bytes=614 * MiB,
        used_bytes=0,
        free_bytes=143_158 * MiB,
    )
    ledger = build_ledger(snapshot)
    assert ledger.free_bytes == (143_771 - 614) * MiB
    assert sum(line.bytes for line in ledger.lines) == snapshot.total_bytes
    assert any("nvml free" in note for note in ledger.notes)


def test_estimates_are_clipped_to_the_measured_process_total():
    process = ProcessSnapshot(
        pid=1,
        deployment="big",
        used_bytes=10 * GiB,
        spec=DeploymentSpec(weights_bytes=8 * GiB, kv_reservation_bytes=4 * GiB),
    )
    snapshot = CardSnapshot("c", 0.0, 80 * GiB, 0, 10 * GiB, 70 * GiB, (process,))
    table = summary(build_ledger(snapshot))
    # Weights are placed first and fit; the KV estimate gets only the 2 GiB left.
    assert table[(LineKind.MODEL_WEIGHTS, "big")] == (8 * GiB, E)
    assert table[(LineKind.KV_CACHE_USE_UNKNOWN, "big")] == (2 * GiB, E)
    assert table[(LineKind.UNATTRIBUTED, "big")] == (0, E)
    assert any("KV pool" in note and "cut" in note for note in build_ledger(snapshot).notes)


def test_measured_processes_overflowing_card_used_are_scaled_together():
    # Per-process readings taken a moment apart from the card's: 6 + 4 GiB against 9 GiB used.
    processes = (
        ProcessSnapshot(1, "a", used_bytes=6 * GiB),
        ProcessSnapshot(2, "b", used_bytes=4 * GiB),
    )
    snapshot = CardSnapshot("c", 0.0, 80 * GiB, 0, 9 * GiB, 71 * GiB, processes)
    ledger = build_ledger(snapshot)
    table = summary(ledger)
    # Shares of 9 GiB: 5,798,205,849.6 and 3,865,470,566.4 B; the larger fraction rounds up.
    assert table[(LineKind.UNATTRIBUTED, "a")] == (5_798_205_850, M)
    assert table[(LineKind.UNATTRIBUTED, "b")] == (3_865_470_566, M)
    assert table[(LineKind.UNATTRIBUTED, None)] == (0, M)
    assert sum(line.bytes for line in ledger.lines) == 80 * GiB
    assert len(ledger.notes) == 2


def test_container_process_without_nvml_figure_is_estimated_from_its_allocator():
    process = ProcessSnapshot(
        pid=None,
        deployment="chat",
        used_bytes=None,
        allocator=AllocatorStats(reserved_bytes=20 * GiB, allocated_bytes=15 * GiB),
        spec=DeploymentSpec(
            weights_bytes=10 * GiB, nccl_bytes=GiB // 2, cuda_context_bytes=518 * MiB
        ),
    )
    snapshot = CardSnapshot("c", 0.0, 80 * GiB, GiB // 2, 22 * GiB, 57 * GiB + GiB // 2, (process,))
    table = summary(build_ledger(snapshot))
    # Footprint estimate = 20 GiB pool + 0.5 GiB NCCL + 518 MiB context (the H200's, an
    # estimate); the card's 22 GiB leave 1.5 GiB - 518 MiB.
    assert table[(LineKind.CUDA_CONTEXT, "chat")] == (518 * MiB, E)
    assert table[(LineKind.UNATTRIBUTED, None)] == (GiB + GiB // 2 - 518 * MiB, E)
    assert table[(LineKind.ALLOCATOR_RESERVE, "chat")] == (5 * GiB, M)
    assert table[(LineKind.WORKSPACE, "chat")] == (5 * GiB, E)  # 15 allocated - 10 weights
    assert (LineKind.FRAGMENTATION, "chat") not in table  # inactive split not reported


def test_allocated_memory_without_a_weights_figure_is_not_called_workspace():
    process = ProcessSnapshot(
        pid=7,
        deployment="mystery",
        used_bytes=12 * GiB,
        allocator=AllocatorStats(reserved_bytes=11 * GiB, allocated_bytes=10 * GiB),
    )
    snapshot = CardSnapshot("c", 0.0, 80 * GiB, 0, 12 * GiB, 68 * GiB, (process,))
    lines = build_ledger(snapshot).lines_for("mystery")
    assert LineKind.WORKSPACE not in {line.kind for line in lines}
    unattributed = sorted(line.bytes for line in lines if line.kind is LineKind.UNATTRIBUTED)
    # The 10 GiB allocated, not broken down; the 1 GiB outside the 11 GiB pool is what NVML
    # counts beside the allocator (CUDA context, libraries), measured.
    assert unattributed == [10 * GiB]
    context = [line for line in lines if line.kind is LineKind.CUDA_CONTEXT]
    assert [(line.bytes, line.basis) for line in context] == [(GiB, M)]


def test_without_nvml_the_card_is_estimated_from_specs():
    process = ProcessSnapshot(3, "solo", spec=DeploymentSpec(weights_bytes=10 * GiB))
    ledger = build_ledger(CardSnapshot("c", 0.0, 80 * GiB, processes=(process,)))
    table = summary(ledger)
    assert table[(LineKind.DRIVER_RESERVED, None)] == (0, E)
    assert table[(LineKind.MODEL_WEIGHTS, "solo")] == (10 * GiB, E)
    assert table[(LineKind.FREE, None)] == (70 * GiB, E)


def test_driver_reserve_is_derived_from_total_used_free_when_not_reported():
    snapshot = CardSnapshot("c", 0.0, 80 * GiB, None, 30 * GiB, 49 * GiB)
    table = summary(build_ledger(snapshot))
    assert table[(LineKind.DRIVER_RESERVED, None)] == (GiB, M)
    assert table[(LineKind.FREE, None)] == (49 * GiB, M)


def test_ledger_at_a_past_moment_uses_the_snapshot_current_then():
    history = [
        CardSnapshot("c", at, 80 * GiB, 0, used, 80 * GiB - used)
        for at, used in ((300.0, 30 * GiB), (100.0, 10 * GiB), (200.0, 20 * GiB))
    ]
    assert build_ledger(snapshot_at(history, 250.0)).free_bytes == 60 * GiB
    assert build_ledger(snapshot_at(history, 200.0)).free_bytes == 60 * GiB
    assert build_ledger(snapshot_at(history, 1e9)).free_bytes == 50 * GiB


@st.composite
def allocator_stats(draw):
    reserved = draw(st.integers(0, 40 * GiB))
    allocated = draw(st.integers(0, reserved))
    pool_free = reserved - allocated
    return AllocatorStats(
        reserved,
        allocated,
        draw(st.none() | st.integers(0, pool_free)),
        draw(st.none() | st.integers(0, pool_free)),
    )


maybe_bytes = st.none() | st.integers(0, 40 * GiB)


@st.composite
def processes(draw):
    spec = draw(
        st.none()
        | st.builds(DeploymentSpec, maybe_bytes, maybe_bytes, maybe_bytes, maybe_bytes, maybe_bytes)
    )
    kv = draw(
        st.none()
        | st.builds(
            EngineKvCache,
            st.integers(0, 40 * GiB),
            st.none() | st.floats(0, 1),
            st.sampled_from(Basis),
        )
    )
    return ProcessSnapshot(
        draw(st.none() | st.integers(1, 99999)),
        draw(st.none() | st.sampled_from(["chat", "code", "embed"])),
        draw(maybe_bytes),
        draw(st.none() | allocator_stats()),
        kv,
        spec,
    )


@st.composite
def snapshots(draw):
    total = draw(st.integers(1, 160 * GiB))
    reserved, used, free = (draw(st.none() | st.integers(0, total)) for _ in range(3))
    return CardSnapshot(
        "c", 0.0, total, reserved, used, free, tuple(draw(st.lists(processes(), max_size=4)))
    )


@given(snapshots())
def test_any_snapshot_gives_non_negative_lines_summing_exactly_to_the_total(snapshot):
    ledger = build_ledger(snapshot)
    assert sum(line.bytes for line in ledger.lines) == snapshot.total_bytes
    assert all(isinstance(line, LedgerLine) and line.bytes >= 0 for line in ledger.lines)
    assert {line.deployment for line in ledger.lines} <= {
        None,
        *(p.deployment for p in snapshot.processes),
    }
