"""Gate 1: the per-card memory ledger."""

import pytest
from django.utils import timezone

from console.core.reason_text import render_in
from console.proposals.gate_checks import check, check_memory
from console.proposals.gates import GateStatus
from console.proposals.gates.memory import (
    CardBudget,
    MemoryRequest,
    Share,
    Tenant,
    evaluate_memory,
)
from console.proposals.services import do_record_gate_results, do_start_checks, do_submit
from inventory.analytics.context import cuda_context_estimate
from inventory.analytics.kv import KvShape, kv_reservation_per_card
from inventory.analytics.units import format_gib
from inventory.models import Deployment, Event, Gpu
from inventory.reports.capacity import CardCapacity
from tests.console.proposals.support import create_proposal, english, seed_host
from tests.factories import (
    GIB,
    DeploymentFactory,
    GpuFactory,
    MigSliceFactory,
    ServedModelFactory,
)

HEADROOM = 4 * GIB
CONTEXT = 518 * 1024**2


def card(name="h:0", *, tenants=(), frag=0, status="green", total=80 * GIB, reserved=0):
    return CardBudget(
        card=name,
        total_bytes=total,
        driver_reserved_bytes=reserved,
        tenants=tuple(Tenant(n, b, "P95 measured") for n, b in tenants),
        fragmentation_peak_bytes=frag,
        fragmentation_index_peak=0.62 if status == "red" else 0.1,
        fragmentation_status=status,
        measured=True,
    )


def test_a_card_that_holds_everything_with_headroom_passes():
    target = card(tenants=[("chat", 40 * GIB)], frag=2 * GIB, reserved=GIB)
    outcome = evaluate_memory(
        MemoryRequest("new", Share(20 * GIB, 6 * GIB, 2 * GIB), HEADROOM, (target,), (target,))
    )
    assert outcome.status is GateStatus.PASS
    row = outcome.numbers["cards"][0]
    # 20 + 6 + 2 + 40 + 2 + 4 = 74 GiB of 79 GiB usable.
    assert row["need_bytes"] == 74 * GIB
    assert row["usable_bytes"] == 79 * GIB
    assert row["margin_bytes"] == 5 * GIB


def test_one_byte_over_fails_with_the_breakdown():
    target = card(tenants=[("chat", 48 * GIB + 1)])
    outcome = evaluate_memory(
        MemoryRequest("new", Share(20 * GIB, 6 * GIB, 2 * GIB), HEADROOM, (target,), (target,))
    )
    assert outcome.status is GateStatus.FAIL
    assert outcome.reasons[0].code == "gate.memory.short"
    assert outcome.reasons[0].params["card"] == "h:0"
    assert "co-tenants 48.0 GiB" in english(outcome.reasons[0])


def test_red_fragmentation_fails_a_card_whose_totals_fit():
    target = card(tenants=[("chat", 10 * GIB)], frag=GIB, status="red")
    outcome = evaluate_memory(
        MemoryRequest("new", Share(10 * GIB, 2 * GIB, 2 * GIB), HEADROOM, (target,), (target,))
    )
    row = outcome.numbers["cards"][0]
    assert row["fits"] is True
    assert outcome.status is GateStatus.FAIL
    assert outcome.summary.params["first"].code == "gate.memory.fragmentation_red"
    assert outcome.runbook_slug == "defragment-off-peak-reload"


def test_a_multi_card_share_divides_weights_but_not_kv_context_or_workspace():
    # The KV comes per card already (kv_reservation_per_card: an MLA latent is whole on every
    # card); the CUDA context is one process's on each card.
    kv = kv_reservation_per_card(20 * GIB, None, 2)
    share = Share.per_card(140 * GIB, kv, 2 * GIB, 2, cuda_context_estimate("NVIDIA H200"))
    assert (share.weights_bytes, share.kv_bytes, share.workspace_bytes) == (
        70 * GIB,
        10 * GIB,
        2 * GIB,
    )
    assert share.context_bytes == 518 * 1024**2
    assert share.total_bytes == 82 * GIB + 518 * 1024**2
    assert share.kv_how == "even_split"


def test_an_mla_model_at_tp8_needs_its_whole_reservation_on_each_card():
    # DeepSeek-V3 (config.json: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64).
    shape = KvShape(61, 128, 128, "bf16", mla=True, kv_lora_rank=512, qk_rope_head_dim=64)
    kv = kv_reservation_per_card(40 * GIB, shape, 8)
    share = Share.per_card(8 * 80 * GIB, kv, 2 * GIB, 8)
    target = card(total=141 * GIB)
    outcome = evaluate_memory(MemoryRequest("dsv3", share, HEADROOM, (target,), (target,)))
    row = outcome.numbers["cards"][0]
    # 80 GiB weights + 40 GiB KV (not 5) + 2 GiB + 4 GiB headroom = 126 GiB of 141 GiB.
    assert row["kv_bytes"] == 40 * GIB
    assert row["need_bytes"] == 126 * GIB


def test_capacity_never_adds_across_cards():
    # Two cards of 40 GiB free each: 80 GiB by the total, not one byte more than 40 a card.
    cards = (card("h:0", tenants=[("a", 36 * GIB)]), card("h:1", tenants=[("b", 36 * GIB)]))
    outcome = evaluate_memory(
        MemoryRequest("big", Share(50 * GIB, 0, 0), 0, (), cards, unplaced_reason="no room")
    )
    assert outcome.status is GateStatus.FAIL
    assert outcome.numbers["host_free_total_bytes"] == 88 * GIB
    assert outcome.reasons[0] == "no room"
    assert all(not row["fits"] for row in outcome.numbers["cards"])


@pytest.mark.django_db
def test_the_seed_host_refuses_a_model_that_fits_its_total_but_no_card(personas):
    host = seed_host()
    # 66 + 10 + 2 GiB + a CUDA context a card: under the host's free total, over any card.
    model = ServedModelFactory(name="mixtral-8x7b-q4", weights_bytes=66 * GIB)
    proposal = create_proposal(
        personas["oncall"],
        host=host,
        model=model,
        let_solver_choose=True,
        kv_reservation_bytes=10 * GIB,
        isolation_mode=Deployment.Isolation.TIME_SLICING,
    )
    outcome, chosen = check_memory(proposal, timezone.now())
    assert chosen == []
    assert outcome.status is GateStatus.FAIL
    rows = {row["card"]: row for row in outcome.numbers["cards"]}
    assert list(rows) == ["a100-node:0", "a100-node:1", "a100-node:2"]
    # Per card: co-tenants as packed (45 + 30 / 25 + 20 + 15 / none), each process with the
    # 518 MiB CUDA context measured on an H200 (docs/gpu-check.md), an estimate on an A100.
    assert [rows[c]["tenants_bytes"] for c in rows] == [
        75 * GIB + 2 * CONTEXT,
        60 * GIB + 3 * CONTEXT,
        0,
    ]
    assert [rows[c]["tenants_context_bytes"] for c in rows] == [2 * CONTEXT, 3 * CONTEXT, 0]
    assert all(
        t["context_source"] == "h200_estimate" for row in rows.values() for t in row["tenants"]
    )
    share = 78 * GIB + CONTEXT
    assert rows["a100-node:2"]["context_bytes"] == CONTEXT
    assert [rows[c]["need_bytes"] for c in rows] == [
        rows[c]["tenants_bytes"] + share + HEADROOM for c in rows
    ]
    assert all(row["usable_bytes"] == 80 * GIB and not row["fits"] for row in rows.values())
    free = 0 + (80 * GIB - 60 * GIB - 3 * CONTEXT - HEADROOM) + (80 * GIB - HEADROOM)
    assert outcome.numbers["host_free_total_bytes"] == free
    assert outcome.summary.code == "gate.memory.no_single_card"
    assert outcome.summary.params["model"] == "mixtral-8x7b-q4"
    assert "a100-node:2, would need 82.5 GiB of 80.0 GiB usable" in english(outcome.summary)
    assert f"{format_gib(free)} free in total" in english(outcome.summary)
    assert outcome.reasons[0].code == "gate.memory.solver_no_place"
    assert "a100-node:2 is short by 2.5 GiB" in " ".join(map(english, outcome.reasons))
    assert outcome.evidence["estimates_note"]["code"] == "gate.memory.estimates_note"
    assert "CUDA context" in english(outcome.evidence["estimates_note"])


@pytest.mark.django_db
def test_on_a_named_card_the_seed_host_says_by_how_much(personas):
    host = seed_host()
    model = ServedModelFactory(name="mixtral-8x7b-q4", weights_bytes=66 * GIB)
    empty = host.gpus.get(index=2)
    proposal = create_proposal(
        personas["oncall"], host=host, gpus=[empty], model=model, kv_reservation_bytes=10 * GIB
    )
    outcome, _ = check_memory(proposal, timezone.now())
    assert outcome.status is GateStatus.FAIL
    assert [row["card"] for row in outcome.numbers["cards"]] == ["a100-node:2"]
    assert tuple(map(english, outcome.reasons)) == (
        "a100-node:2 is short by 2.5 GiB: weights 66.0 GiB + KV 10.0 GiB + CUDA context 0.5 GiB "
        "+ workspace 2.0 GiB + co-tenants 0.0 GiB (of which CUDA context 0.0 GiB) + "
        "fragmentation 0.0 GiB + headroom 4.0 GiB = 82.5 GiB of 80.0 GiB usable.",
    )


@pytest.mark.django_db
def test_the_solver_places_a_smaller_model_and_apply_uses_its_cards(personas):
    host = seed_host()
    model = ServedModelFactory(name="phi-3-mini", weights_bytes=8 * GIB)
    proposal = create_proposal(
        personas["oncall"],
        host=host,
        model=model,
        let_solver_choose=True,
        isolation_mode=Deployment.Isolation.GPU_GROUP,
    )
    do_submit(proposal, acting_user=personas["oncall"])
    do_start_checks(proposal.pk, 1)
    checked = check(proposal)
    memory = checked.outcomes[0]
    assert memory.status is GateStatus.PASS, english(memory.summary)
    # A GPU group takes a card of its own: only a100-node:2 is free.
    assert [str(gpu) for gpu in checked.solver_gpus] == ["a100-node:2"]
    assert "chosen by the solver: greedy (best-fit-decreasing), " in english(memory.summary)
    chosen_by = memory.numbers["chosen_by"]
    assert render_in(chosen_by, "zh-hans").startswith("贪心（最佳适应递减），")
    assert f"{chosen_by['params']['solve_ms']} ms" in render_in(chosen_by, "zh-hans")
    do_record_gate_results(proposal.pk, 1, checked)
    assert [str(gpu) for gpu in proposal.target_gpus()] == ["a100-node:2"]


@pytest.mark.django_db
def test_measured_p95_and_red_fragmentation_come_from_card_capacity(personas, monkeypatch):
    host = seed_host()
    busy = host.gpus.get(index=1)
    tenants = {d.served_model.name: d.pk for d in Deployment.objects.filter(gpus=busy)}

    def capacity(gpu: Gpu, **kwargs) -> CardCapacity:
        measured = gpu == busy
        return CardCapacity(
            gpu_id=gpu.pk,
            card=str(gpu),
            total_bytes=gpu.memory_total_bytes,
            driver_reserved_bytes=512 * 1024**2 if measured else 0,
            samples=600 if measured else 0,
            demand_p95={tenants["qwen2-14b-q4"]: 21 * GIB} if measured else {},
            demand_peak={},
            context_p95={tenants["qwen2-14b-q4"]: CONTEXT} if measured else {},
            context_estimated=frozenset(),
            joint_peak_bytes=0,
            allocator_held_peak_bytes=3 * GIB if measured else 0,
            fragmentation_index_peak=0.55 if measured else None,
            fragmentation_status="red" if measured else "green",
        )

    monkeypatch.setattr("console.proposals.budgets.card_capacity", capacity)
    proposal = create_proposal(
        personas["oncall"],
        host=host,
        gpus=[busy],
        model=ServedModelFactory(weights_bytes=2 * GIB),
        kv_reservation_bytes=GIB,
        isolation_mode=Deployment.Isolation.TIME_SLICING,
    )
    outcome, _ = check_memory(proposal, timezone.now())
    row = outcome.numbers["cards"][0]
    by_name = {t["name"]: t for t in row["tenants"]}
    assert by_name["qwen2-14b-q4"] == {
        "name": "qwen2-14b-q4",
        "demand_bytes": 21 * GIB,
        "basis": {"code": "gate.memory.basis.measured", "params": {"count": 7}},
        "context_bytes": CONTEXT,
        "context_source": "nvml_used_minus_allocator",
    }
    measured = by_name["qwen2-14b-q4"]["basis"]
    assert english(measured) == "P95 measured, 7 days, with what NVML counts outside the allocator"
    assert render_in(measured, "zh-hans") == "实测 P95，7 天，含 NVML 统计的分配器之外的部分"
    assert english(by_name["bge-large-fp16"]["basis"]).startswith("estimate")
    assert row["fragmentation_peak_bytes"] == 3 * GIB
    assert row["usable_bytes"] == 80 * GIB - 512 * 1024**2
    # 2 + 1 + 2 + (21 + 20 + 15) + 3 + 4 = 68 GiB fits in 79.5 GiB: red fragmentation fails it.
    assert row["fits"] is True
    assert outcome.status is GateStatus.FAIL
    assert "framework fragmentation stayed red" in english(outcome.summary)


@pytest.mark.django_db
def test_recent_ooms_on_a_target_card_point_to_the_triage(personas):
    host = seed_host()
    empty = host.gpus.get(index=2)
    Event.objects.create(
        host=host,
        gpu=empty,
        kind=Event.Kind.OOM,
        at=timezone.now(),
        batch_id="00000000-0000-4000-8000-000000000002",
        position=0,
    )
    proposal = create_proposal(personas["oncall"], host=host, gpus=[empty])
    outcome, _ = check_memory(proposal, timezone.now())
    assert outcome.status is GateStatus.PASS
    assert outcome.evidence["recent_ooms"] == {"a100-node:2": 1}
    assert outcome.runbook_slug == "oom-triage"
    assert outcome.summary.params["then"].params == {"ooms": "a100-node:2 1"}
    assert "Recent OOMs on the target cards (a100-node:2 1)" in english(outcome.summary)


@pytest.mark.django_db
def test_sibling_compute_instances_share_one_gpu_instances_memory(personas):
    # One 3g.71gb GPU instance split into 1c.3g.71gb and 2c.3g.71gb compute instances (NVIDIA
    # MIG user guide, "Concepts": compute instances of a GI share its memory). NVML shows each
    # with the GI's whole 69.75 GiB (71424 MiB, the H200 capture); the gate counts it once.
    gpu = GpuFactory(product_name="NVIDIA H200", memory_total_bytes=143771 * 1024**2,
                     mig_mode=Gpu.MigMode.ENABLED)  # fmt: skip
    first, second = (
        MigSliceFactory(gpu=gpu, profile_name=name, start_slot=0, size_slots=4,
                        memory_bytes=71424 * 1024**2, gpu_instance_id=1, compute_instance_id=ci)
        for ci, name in enumerate(("1c.3g.71gb", "2c.3g.71gb"))
    )  # fmt: skip
    DeploymentFactory(
        host=gpu.host, isolation_mode=Deployment.Isolation.MIG, mig_slice=first,
        served_model=ServedModelFactory(name="chat", weights_bytes=40 * GIB),
        kv_reservation_bytes=10 * GIB,
    )  # fmt: skip
    proposal = create_proposal(
        personas["oncall"], host=gpu.host, gpus=[],
        model=ServedModelFactory(name="code", weights_bytes=10 * GIB),
        isolation_mode=Deployment.Isolation.MIG, mig_slice=second,
        kv_reservation_bytes=4 * GIB,
    )  # fmt: skip
    outcome, _ = check_memory(proposal, timezone.now())
    (row,) = outcome.numbers["cards"]
    # chat's 40 + 10 GiB + context + workspace on the first CI count against the second's GI.
    assert [t["name"] for t in row["tenants"]] == ["chat"]
    assert row["usable_bytes"] == 71424 * 1024**2
    assert outcome.status is GateStatus.FAIL
    basis = row["tenants"][0]["basis"]
    assert english(basis) == "estimate, on 1c.3g.71gb of the same GPU instance"
    assert render_in(basis, "zh-hans") == "估算，位于同一 GPU 实例的 1c.3g.71gb 上"
    alone = create_proposal(
        personas["oncall"], host=gpu.host, gpus=[],
        model=ServedModelFactory(name="small", weights_bytes=2 * GIB),
        isolation_mode=Deployment.Isolation.MIG, mig_slice=second, kv_reservation_bytes=GIB,
    )  # fmt: skip
    assert check_memory(alone, timezone.now())[0].status is GateStatus.PASS


@pytest.mark.django_db
def test_co_tenants_with_history_count_at_their_joint_peak_not_the_sum_of_p95s(personas):
    import datetime as dt

    from tests.batches import write_history

    # Two tenants of one card peak at different hours (chat at :10-:15, code at :40-:45): each
    # P95 is 37 GiB, so their P95s sum to 74 GiB, but together they never hold more than 67.
    gpu = GpuFactory(index=0, memory_total_bytes=80 * GIB)
    chat, code = (
        DeploymentFactory(host=gpu.host, gpus=[gpu], served_model__name=name,
                          isolation_mode=Deployment.Isolation.TIME_SLICING)
        for name in ("chat", "code")
    )  # fmt: skip

    def demand(minute, index):
        start = 10 if index == 0 else 40
        return (37 if start <= minute % 60 < start + 5 else 30) * GIB

    start = (timezone.now() - dt.timedelta(hours=6)).timestamp()
    write_history(gpu.host, [(gpu, chat), (gpu, code)], start=start, minutes=360, demand=demand,
                  alloc_free=2 * GIB, largest_block=2 * GIB)  # fmt: skip
    proposal = create_proposal(personas["oncall"], host=gpu.host, gpus=[gpu],
                               model=ServedModelFactory(weights_bytes=GIB),
                               kv_reservation_bytes=GIB)  # fmt: skip
    outcome, _ = check_memory(proposal, timezone.now())
    (row,) = outcome.numbers["cards"]
    assert row["tenants_sum_of_p95_bytes"] == 74 * GIB
    assert row["tenants_joint_peak_bytes"] == 67 * GIB
    assert row["tenants_basis"] == "joint_peak"
    assert row["tenants_bytes"] == 67 * GIB
    assert outcome.summary.params["breakdown"].code == "gate.memory.breakdown_joint"
    assert "at their joint peak" in english(outcome.summary)


def test_a_fallback_index_is_named_as_another_scale():
    target = card(frag=GIB, status="red")
    target = CardBudget(**{**target.__dict__, "fragmentation_scale": "inactive_split_over_reserved",
                           "fragmentation_index_sustained": 0.55})  # fmt: skip
    outcome = evaluate_memory(
        MemoryRequest("new", Share(GIB, GIB, GIB), HEADROOM, (target,), (target,))
    )
    assert outcome.reasons[0].code == "gate.memory.fragmentation_red_fallback"
    assert "on the fallback scale (inactive split / reserved" in english(outcome.reasons[0])
