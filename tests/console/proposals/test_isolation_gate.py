"""Gate 3: GPU groups or MIG, or an explicit acknowledgement of the MPS note."""

import pytest
from django.utils import timezone

from console.proposals import services
from console.proposals.gate_checks import check_isolation
from console.proposals.gates import GateStatus
from console.proposals.gates.isolation import (
    InterferenceFinding,
    IsolationRequest,
    evaluate_isolation,
)
from inventory.analytics.interference import InterferenceReport, InterferenceVerdict
from inventory.analytics.reasons import Reason
from inventory.models import Deployment
from tests.console.proposals.support import create_proposal, english
from tests.factories import DeploymentFactory, GpuFactory


def test_mps_without_acknowledgement_fails_and_links_the_note():
    outcome = evaluate_isolation(IsolationRequest("m", "mps", ("chat",), ()))
    assert outcome.status is GateStatus.FAIL
    assert outcome.runbook_slug == "mps-not-hard-isolation"
    assert outcome.summary.params["trigger"].code == "gate.isolation.mps"
    assert "takes down every client" in english(outcome.summary)
    assert outcome.reasons[-1].code == "gate.isolation.use_groups"


def test_mps_with_acknowledgement_passes_and_names_who_and_the_fault_domain():
    outcome = evaluate_isolation(
        IsolationRequest("m", "mps", ("chat",), (), "oncall", "2025-06-11T14:05+00:00")
    )
    assert outcome.status is GateStatus.PASS
    assert outcome.summary.code == "gate.isolation.acknowledged_sharing"
    assert outcome.summary.params["who"] == "oncall"
    assert english(outcome.summary).startswith("oncall acknowledged “MPS is not hard isolation” at")
    assert "chat share the fault domain" in english(outcome.summary)


def test_a_gpu_group_that_shares_its_cards_is_not_one():
    outcome = evaluate_isolation(IsolationRequest("m", "gpu_group", ("chat", "embed"), ()))
    assert outcome.status is GateStatus.FAIL
    assert outcome.summary.params == {"models": ["chat", "embed"]}
    assert "chat, embed run on them" in english(outcome.summary)


@pytest.mark.parametrize(
    ("mode", "cotenants"), [("mig", ("neighbour",)), ("gpu_group", ()), ("time_slicing", ())]
)
def test_isolated_placements_pass(mode, cotenants):
    assert evaluate_isolation(IsolationRequest("m", mode, cotenants, ())).status is GateStatus.PASS


def test_measured_interference_needs_the_acknowledgement_too():
    finding = InterferenceFinding("chat #3", "P99 1.2 s with co-tenants busy vs 0.6 s idle")
    outcome = evaluate_isolation(IsolationRequest("m", "time_slicing", ("chat",), (finding,)))
    assert outcome.status is GateStatus.FAIL
    assert outcome.reasons[1].code == "gate.isolation.interference.sentence"
    assert "Interference measured on the target cards: chat #3: P99 1.2 s" in english(
        outcome.reasons[1]
    )


@pytest.mark.django_db
def test_the_acknowledgement_is_stored_with_who_and_when(personas, monkeypatch):
    monkeypatch.setattr("console.proposals.gate_checks.analysis.interference", lambda *a: [])
    gpu = GpuFactory()
    DeploymentFactory(host=gpu.host, gpus=[gpu], isolation_mode=Deployment.Isolation.MPS)
    proposal = create_proposal(
        personas["oncall"], host=gpu.host, gpus=[gpu], isolation_mode=Deployment.Isolation.MPS
    )
    assert check_isolation(proposal, [gpu], timezone.now()).status is GateStatus.FAIL
    acknowledged = services.do_edit_proposal(
        proposal, acting_user=personas["oncall"], mps_acknowledged=True
    )
    assert acknowledged.mps_acknowledged_by == personas["oncall"]
    assert acknowledged.mps_acknowledged_at is not None
    outcome = check_isolation(acknowledged, [gpu], timezone.now())
    assert outcome.status is GateStatus.PASS
    assert outcome.numbers["acknowledged_by"] == "oncall"
    withdrawn = services.do_edit_proposal(
        acknowledged, acting_user=personas["oncall"], mps_acknowledged=False
    )
    assert withdrawn.mps_acknowledged_at is None


@pytest.mark.django_db
def test_interference_on_the_target_card_comes_from_the_host_analysis(personas, monkeypatch):
    gpu = GpuFactory()
    other = GpuFactory(host=gpu.host, index=gpu.index + 1)
    neighbour = DeploymentFactory(host=gpu.host, gpus=[gpu])
    elsewhere = DeploymentFactory(host=gpu.host, gpus=[other])

    def report(deployment, flagged):
        return InterferenceReport(
            deployment=f"{deployment.served_model.name} #{deployment.pk}",
            cotenants=(),
            tail_pct=99.0,
            busy_samples=40,
            idle_samples=40,
            unknown_samples=0,
            busy_tail_s=1.2,
            idle_tail_s=0.6,
            ratio=2.0,
            verdict=InterferenceVerdict.TAIL_RISES if flagged else InterferenceVerdict.NO_EFFECT,
            explanation="P99 1200 ms with co-tenants busy vs 600 ms idle",
        )

    monkeypatch.setattr(
        "console.proposals.gate_checks.analysis.interference",
        lambda host, now: [report(neighbour, True), report(elsewhere, True)],
    )
    proposal = create_proposal(
        personas["oncall"],
        host=gpu.host,
        gpus=[gpu],
        isolation_mode=Deployment.Isolation.TIME_SLICING,
    )
    outcome = check_isolation(proposal, [gpu], timezone.now())
    assert outcome.status is GateStatus.FAIL
    assert [f["deployment"] for f in outcome.numbers["interference"]] == [
        f"{neighbour.served_model.name} #{neighbour.pk}"
    ]


def test_sharing_one_mig_compute_instance_needs_the_acknowledgement():
    # MPS or time-slicing inside a MIG instance is sharing again: one fault domain, one SM set.
    request = IsolationRequest("m", "mig", (), (), instance_cotenants=("chat",))
    outcome = evaluate_isolation(request)
    assert outcome.status is GateStatus.FAIL
    assert outcome.runbook_slug == "mps-not-hard-isolation"
    assert outcome.summary == Reason("gate.isolation.mig_shared", {"models": ["chat"]})
    acknowledged = evaluate_isolation(
        IsolationRequest("m", "mig", (), (), "oncall", "2026-12-01T10:00+00:00", ("chat",))
    )
    assert acknowledged.status is GateStatus.PASS
    assert "chat share the MIG compute instance" in english(acknowledged.summary)


def test_sibling_compute_instances_are_named_as_sharing_the_gpu_instances_memory():
    outcome = evaluate_isolation(
        IsolationRequest("m", "mig", (), (), gpu_instance_siblings=("embed",))
    )
    assert outcome.status is GateStatus.PASS
    assert outcome.summary.params["then"].params == {"models": ["embed"]}
    assert "embed on sibling compute instances share the GPU instance's memory" in english(
        outcome.summary
    )
    assert outcome.numbers["gpu_instance_siblings"] == ["embed"]


def test_a_replaced_deployment_is_no_co_tenant(personas):
    gpu = GpuFactory()
    replica = DeploymentFactory(
        host=gpu.host, gpus=[gpu], isolation_mode=Deployment.Isolation.TIME_SLICING
    )
    kept = create_proposal(personas["oncall"], host=gpu.host, gpus=[gpu])
    assert check_isolation(kept, [gpu], timezone.now()).status is GateStatus.FAIL
    replacing = create_proposal(personas["oncall"], host=gpu.host, gpus=[gpu], replaces=[replica])
    assert check_isolation(replacing, [gpu], timezone.now()).status is GateStatus.PASS
