"""Gate 1: the per-card memory ledger."""

import pytest
from django.utils import timezone

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
from inventory.models import Deployment, Event, Gpu
from inventory.reports.capacity import CardCapacity
from tests.factories import GIB, ServedModelFactory
from tests.proposals.support import create_proposal, seed_host

HEADROOM = 4 * GIB


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
    assert "h:0 is short by" in outcome.reasons[0]
    assert "co-tenants 48.0 GiB" in outcome.reasons[0]


def test_red_fragmentation_fails_a_card_whose_totals_fit():
    target = card(tenants=[("chat", 10 * GIB)], frag=GIB, status="red")
    outcome = evaluate_memory(
        MemoryRequest("new", Share(10 * GIB, 2 * GIB, 2 * GIB), HEADROOM, (target,), (target,))
    )
    row = outcome.numbers["cards"][0]
    assert row["fits"] is True
    assert outcome.status is GateStatus.FAIL
    assert "fragmentation is red" in outcome.summary
    assert outcome.runbook_slug == "defragment-off-peak-reload"


def test_a_multi_card_share_divides_weights_and_kv_but_not_the_workspace():
    share = Share.per_card(140 * GIB, 20 * GIB, 2 * GIB, 2)
    assert (share.weights_bytes, share.kv_bytes, share.workspace_bytes) == (
        70 * GIB,
        10 * GIB,
        2 * GIB,
    )


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
    # 66 + 10 + 2 = 78 GiB a card: under the host's 93 GiB free after headroom, over any card.
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
    # Per card: co-tenants as packed (75 / 60 / 0 GiB) + 78 GiB + 4 GiB headroom vs 80 GiB.
    assert [rows[c]["tenants_bytes"] // GIB for c in rows] == [75, 60, 0]
    assert [rows[c]["need_bytes"] // GIB for c in rows] == [157, 142, 82]
    assert all(row["usable_bytes"] == 80 * GIB and not row["fits"] for row in rows.values())
    assert outcome.numbers["host_free_total_bytes"] == 93 * GIB
    assert "No single card can hold mixtral-8x7b-q4" in outcome.summary
    assert "a100-node:2, would need 82.0 GiB of 80.0 GiB usable" in outcome.summary
    assert "93.0 GiB free in total" in outcome.summary
    assert outcome.reasons[0].startswith("The solver found no place")
    assert "a100-node:2 is short by 2.0 GiB" in " ".join(outcome.reasons)
    assert "estimates" in outcome.evidence["estimates_note"]


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
    assert outcome.reasons == (
        "a100-node:2 is short by 2.0 GiB: weights 66.0 GiB + KV 10.0 GiB + workspace 2.0 GiB + "
        "co-tenants 0.0 GiB + fragmentation 0.0 GiB + headroom 4.0 GiB = 82.0 GiB of 80.0 GiB "
        "usable.",
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
    assert memory.status is GateStatus.PASS, memory.summary
    # A GPU group takes a card of its own: only a100-node:2 is free.
    assert [str(gpu) for gpu in checked.solver_gpus] == ["a100-node:2"]
    assert "chosen by the solver" in memory.summary
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
            joint_peak_bytes=0,
            allocator_held_peak_bytes=3 * GIB if measured else 0,
            fragmentation_index_peak=0.55 if measured else None,
            fragmentation_status="red" if measured else "green",
        )

    monkeypatch.setattr("console.proposals.gate_checks.card_capacity", capacity)
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
        "basis": "P95 measured, 7 days",
    }
    assert by_name["bge-large-fp16"]["basis"].startswith("estimate")
    assert row["fragmentation_peak_bytes"] == 3 * GIB
    assert row["usable_bytes"] == 80 * GIB - 512 * 1024**2
    # 2 + 1 + 2 + (21 + 20 + 15) + 3 + 4 = 68 GiB fits in 79.5 GiB: red fragmentation fails it.
    assert row["fits"] is True
    assert outcome.status is GateStatus.FAIL
    assert "framework fragmentation is red" in outcome.summary


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
    assert "Recent OOMs on the target cards (a100-node:2 1)" in outcome.summary
