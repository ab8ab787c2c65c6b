"""The workflow rules, through the services: four eyes, comments, voided approvals, apply."""

import pytest
from django.core.exceptions import ValidationError

from console.core.models import AuditEntry
from console.proposals import services
from console.proposals.gates import Gate
from console.proposals.models import Decision, GateResult, Proposal
from console.proposals.transitions import IllegalTransition, State
from inventory.models import Deployment
from tests.console.proposals.support import (
    applied_change,
    applied_proposal,
    approved_proposal,
    checked,
    create_proposal,
    outcomes,
    ready_proposal,
)
from tests.factories import GIB, DeploymentFactory, GpuFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_a_new_proposal_is_a_draft_with_its_audit_row(personas):
    proposal = create_proposal(personas["oncall"])
    assert proposal.state == State.DRAFT
    assert proposal.revision == 1
    entry = AuditEntry.objects.get(action="proposal.create")
    assert entry.host == proposal.host
    assert entry.actor_name == "oncall"
    assert entry.after["state"] == "draft"


def test_illegal_transitions_are_refused_with_a_clear_message(personas):
    draft = create_proposal(personas["oncall"])
    with pytest.raises(IllegalTransition) as error:
        services.do_approve_proposal(draft, acting_user=personas["approver"])
    assert "Cannot approve a proposal that is draft" in str(error.value)
    with pytest.raises(IllegalTransition, match="only a proposal that is approved can be applied"):
        services.do_apply(draft, acting_user=personas["approver"])
    draft.refresh_from_db()
    assert draft.state == State.DRAFT
    assert not Decision.objects.exists()


def test_the_author_cannot_approve_their_own_proposal(personas):
    author = UserFactory(username="author-approver", roles=["approver"])
    proposal = ready_proposal(author)
    with pytest.raises(services.FourEyesError, match="someone else must approve"):
        services.do_approve_proposal(proposal, acting_user=author)
    proposal.refresh_from_db()
    assert proposal.state == State.READY
    assert not proposal.decisions.exists()


def test_an_approval_keeps_the_gate_evidence_it_approved(personas):
    proposal = approved_proposal(personas["oncall"], personas["approver"])
    assert proposal.state == State.APPROVED
    decision = proposal.decisions.get()
    assert decision.kind == Decision.Kind.APPROVE
    assert decision.decided_by == personas["approver"]
    assert [item["gate"] for item in decision.evidence] == [gate.value for gate in Gate]
    assert all(item["status"] == "pass" for item in decision.evidence)
    assert decision.evidence[0]["summary"].startswith("Memory ledger")
    # The evidence is a copy: later results do not change what was approved.
    GateResult.objects.filter(proposal=proposal).update(summary="rewritten")
    decision.refresh_from_db()
    assert decision.evidence[0]["summary"] != "rewritten"


def test_editing_voids_the_approval_and_runs_the_gates_again(
    personas, django_capture_on_commit_callbacks, monkeypatch
):
    queued = []
    monkeypatch.setattr(
        "console.proposals.queue.queue_gate_checks", lambda pk, rev: queued.append((pk, rev))
    )
    proposal = approved_proposal(personas["oncall"], personas["approver"])
    with django_capture_on_commit_callbacks(execute=True):
        edited = services.do_edit_proposal(
            proposal, acting_user=personas["oncall"], kv_reservation_bytes=7 * GIB
        )
    assert edited.state == State.SUBMITTED
    assert edited.revision == 2
    assert queued == [(proposal.pk, 2)]
    approval = proposal.decisions.get()
    assert approval.voided_at is not None
    assert approval.voided_reason == "edited to revision 2"
    assert "voids 1 approval" in AuditEntry.objects.get(action="proposal.edit").comment
    with pytest.raises(IllegalTransition):
        services.do_apply(edited, acting_user=personas["approver"])
    # The new revision needs its own checks and its own approval.
    rechecked = checked(edited)
    assert rechecked.state == State.READY
    services.do_approve_proposal(rechecked, acting_user=personas["approver"])
    assert proposal.decisions.filter(revision=2, voided_at__isnull=True).count() == 1


def test_an_edit_that_changes_nothing_voids_nothing(personas):
    proposal = approved_proposal(personas["oncall"], personas["approver"])
    same = services.do_edit_proposal(
        proposal, acting_user=personas["oncall"], rationale=proposal.rationale
    )
    assert same.state == State.APPROVED
    assert same.revision == 1
    assert proposal.decisions.get().voided_at is None


def test_a_reject_needs_a_comment(personas):
    proposal = ready_proposal(personas["oncall"])
    for blank in ("", "   "):
        with pytest.raises(services.CommentRequired, match="A rejection needs a comment"):
            services.do_reject(proposal, acting_user=personas["approver"], comment=blank)
    proposal.refresh_from_db()
    assert proposal.state == State.READY
    rejected = services.do_reject(
        proposal, acting_user=personas["approver"], comment="Card 0 is already at 94%."
    )
    assert rejected.state == State.REJECTED
    assert proposal.decisions.get().comment == "Card 0 is already at 94%."
    with pytest.raises(IllegalTransition):
        services.do_edit_proposal(rejected, acting_user=personas["oncall"], rationale="again")


def test_sending_back_needs_a_comment_and_the_author_resubmits(personas):
    proposal = ready_proposal(personas["oncall"])
    with pytest.raises(services.CommentRequired):
        services.do_request_changes(proposal, acting_user=personas["approver"], comment="")
    back = services.do_request_changes(
        proposal, acting_user=personas["approver"], comment="Attach the burst test."
    )
    assert back.state == State.CHANGES_REQUESTED
    assert services.do_submit(back, acting_user=personas["oncall"]).state == State.SUBMITTED


def test_failing_gates_send_the_proposal_back_and_cannot_be_approved(personas):
    proposal = checked(create_proposal(personas["oncall"]), failing=(Gate.KV,))
    assert proposal.state == State.CHANGES_REQUESTED
    entry = AuditEntry.objects.get(action="proposal.checks_failed")
    assert entry.actor_name == "system"
    assert "KV reservation" in entry.comment
    with pytest.raises(IllegalTransition):
        services.do_approve_proposal(proposal, acting_user=personas["approver"])


def test_results_of_an_older_revision_are_ignored(personas):
    proposal = create_proposal(personas["oncall"])
    services.do_submit(proposal, acting_user=personas["oncall"])
    services.do_start_checks(proposal.pk, 1)
    services.do_edit_proposal(proposal, acting_user=personas["oncall"], rollout_steps=5)
    assert services.do_record_gate_results(proposal.pk, 1, outcomes()) is None
    assert not GateResult.objects.exists()
    assert services.do_start_checks(proposal.pk, 1) is None  # a redelivered old message
    assert Proposal.objects.get(pk=proposal.pk).state == State.SUBMITTED


def test_a_check_redelivered_after_a_worker_died_runs_again(personas):
    proposal = create_proposal(personas["oncall"])
    services.do_submit(proposal, acting_user=personas["oncall"])
    assert services.do_start_checks(proposal.pk, 1).state == State.CHECKING
    again = services.do_start_checks(proposal.pk, 1)
    assert again is not None and again.state == State.CHECKING
    assert services.do_record_gate_results(proposal.pk, 1, outcomes()).state == State.READY
    assert AuditEntry.objects.filter(action="proposal.start_checks").count() == 1


def test_a_move_to_another_host_shows_on_both_host_pages(personas):
    source, target = GpuFactory(), GpuFactory()
    deployment = DeploymentFactory(host=source.host, gpus=[source])
    applied_proposal(
        personas["oncall"],
        personas["approver"],
        host=target.host,
        gpus=[target],
        model=deployment.served_model,
        action="move",
        deployment=deployment,
    )
    deployment.refresh_from_db()
    assert deployment.host == target.host
    moved = AuditEntry.objects.filter(action="deployment.move")
    assert {entry.host for entry in moved} == {source.host, target.host}


def test_approval_needs_every_gate_checked_for_the_current_revision(personas):
    proposal = ready_proposal(personas["oncall"])
    GateResult.objects.filter(proposal=proposal, gate=Gate.LOAD_TEST).delete()
    with pytest.raises(services.ProposalError, match="Combined load test not checked"):
        services.do_approve_proposal(proposal, acting_user=personas["approver"])


def test_apply_creates_the_deployment_with_audit_rows_on_the_host(personas):
    gpu = GpuFactory()
    proposal = applied_proposal(
        personas["oncall"],
        personas["approver"],
        host=gpu.host,
        gpus=[gpu],
        engine_memory_fraction=0.4,
        staggered_start=True,
    )
    assert proposal.state == State.APPLIED
    deployment = proposal.deployment
    assert deployment.host == gpu.host
    assert list(deployment.gpus.all()) == [gpu]
    assert deployment.kv_reservation_bytes == 6 * GIB
    # The engine's memory settings the gate checked are the deployment's from now on.
    assert (deployment.engine_memory_fraction, deployment.staggered_start) == (0.4, True)
    assert deployment.admission_policy == Deployment.Admission.QUEUE
    created = AuditEntry.objects.get(action="deployment.create")
    assert created.host == gpu.host
    assert created.actor_name == "oncall"
    assert created.before is None
    assert created.after["gpus"] == [gpu.pk]
    assert created.comment.startswith(f"Proposal #{proposal.pk}:")
    assert proposal.placement_before[1]["cards"][0]["models"] == []
    assert proposal.placement_after[1]["cards"][0]["models"] == [deployment.served_model.name]


def test_roll_back_stops_what_an_addition_created(personas):
    proposal = applied_proposal(personas["oncall"], personas["approver"])
    with pytest.raises(services.CommentRequired):
        services.do_roll_back(proposal, acting_user=personas["oncall"], comment="")
    rolled = services.do_roll_back(
        proposal, acting_user=personas["oncall"], comment="P99 doubled on the canary."
    )
    assert rolled.state == State.ROLLED_BACK
    proposal.deployment.refresh_from_db()
    assert proposal.deployment.status == Deployment.Status.STOPPED
    assert AuditEntry.objects.filter(action="deployment.roll_back").count() == 1


def test_a_move_changes_the_cards_and_a_roll_back_restores_them(personas):
    old = GpuFactory(index=0)
    new = GpuFactory(host=old.host, index=1)
    deployment = DeploymentFactory(host=old.host, gpus=[old])
    proposal = applied_change(personas, deployment, "move", gpus=[new])
    deployment.refresh_from_db()
    assert list(deployment.gpus.all()) == [new]
    moved = AuditEntry.objects.get(action="deployment.move")
    assert moved.before["gpus"] == [old.pk] and moved.after["gpus"] == [new.pk]
    services.do_roll_back(proposal, acting_user=personas["approver"], comment="NVLink pair")
    deployment.refresh_from_db()
    assert list(deployment.gpus.all()) == [old]
    assert deployment.kv_reservation_bytes == 8 * GIB  # the factory's, not the proposal's


def test_a_removal_stops_the_deployment(personas):
    gpu = GpuFactory()
    deployment = DeploymentFactory(host=gpu.host, gpus=[gpu])
    proposal = applied_change(personas, deployment, "remove", gpus=[])
    deployment.refresh_from_db()
    assert deployment.status == Deployment.Status.STOPPED
    assert proposal.deployment == deployment


def test_a_proposal_must_name_real_cards_of_its_host(personas):
    elsewhere = GpuFactory()
    gpu = GpuFactory()
    with pytest.raises(ValidationError) as error:
        create_proposal(personas["oncall"], host=gpu.host, gpus=[elsewhere])
    assert "Not on" in str(error.value)
    with pytest.raises(ValidationError, match="Pick the cards"):
        create_proposal(personas["oncall"], host=gpu.host, gpus=[])


def test_a_switch_from_mps_to_gpu_groups_drops_the_thread_share(personas):
    gpu = GpuFactory()
    deployment = DeploymentFactory(
        host=gpu.host, gpus=[gpu], isolation_mode="mps", mps_active_thread_percentage=50
    )
    applied_change(personas, deployment, "move", isolation_mode="gpu_group")
    deployment.refresh_from_db()
    assert deployment.isolation_mode == "gpu_group"
    assert deployment.mps_active_thread_percentage is None


def test_an_mps_proposal_sets_its_thread_share_and_a_resize_keeps_it(personas):
    gpu = GpuFactory()
    added = applied_proposal(
        personas["oncall"],
        personas["approver"],
        host=gpu.host,
        gpus=[gpu],
        isolation_mode="mps",
        mps_active_thread_percentage=40,
    )
    deployment = added.deployment
    assert deployment.mps_active_thread_percentage == 40
    applied_change(
        personas, deployment, "resize", isolation_mode="mps", kv_reservation_bytes=12 * GIB
    )
    deployment.refresh_from_db()
    assert (deployment.mps_active_thread_percentage, deployment.kv_reservation_bytes) == (
        40,
        12 * GIB,
    )
    change = AuditEntry.objects.filter(action="deployment.resize").get()
    assert change.after["mps_active_thread_percentage"] == 40


def test_a_mig_proposal_cannot_leave_the_cards_to_the_solver(personas):
    gpu = GpuFactory()
    with pytest.raises(ValidationError) as error:
        create_proposal(
            personas["oncall"],
            host=gpu.host,
            gpus=[],
            isolation_mode="mig",
            let_solver_choose=True,
            mps_active_thread_percentage=30,
        )
    assert error.value.message_dict == {
        "let_solver_choose": ["Pick the MIG slice; the solver does not create one."],
        "mps_active_thread_percentage": ["Only MPS deployments take a thread share."],
    }


def test_a_replacement_stops_what_it_replaces_and_a_roll_back_restarts_it(personas):
    gpu = GpuFactory()
    shared = DeploymentFactory(
        host=gpu.host, gpus=[gpu], isolation_mode=Deployment.Isolation.TIME_SLICING
    )
    proposal = applied_proposal(
        personas["oncall"], personas["approver"], host=gpu.host, gpus=[gpu], replaces=[shared]
    )
    shared.refresh_from_db()
    assert shared.status == Deployment.Status.STOPPED
    stop = AuditEntry.objects.get(action="deployment.stop", object_id=str(shared.pk))
    assert stop.actor_name == "oncall"
    assert stop.comment.startswith(f"Proposal #{proposal.pk}:")
    # One change: the new deployment and the stop of what it took over from commit together.
    created = AuditEntry.objects.get(action="deployment.create")
    assert created.change_id == stop.change_id
    services.do_roll_back(proposal, acting_user=personas["oncall"], comment="P99 worse")
    shared.refresh_from_db()
    assert shared.status == Deployment.Status.ACTIVE
    proposal.deployment.refresh_from_db()
    assert proposal.deployment.status == Deployment.Status.STOPPED


def _replicas_on(gpu):
    return [
        DeploymentFactory(
            host=gpu.host, gpus=[gpu], isolation_mode=Deployment.Isolation.TIME_SLICING
        )
        for _ in range(2)
    ]


def _stopped_elsewhere(deployment, personas) -> None:
    """Stopped by another change meanwhile: another proposal that removes it."""
    applied_change(personas, deployment, "remove")
    deployment.refresh_from_db()
    assert deployment.status == Deployment.Status.STOPPED


def test_a_replaced_deployment_that_stopped_meanwhile_is_not_restarted_by_a_roll_back(personas):
    gpu = GpuFactory()
    kept, gone = _replicas_on(gpu)
    proposal = approved_proposal(
        personas["oncall"], personas["approver"], host=gpu.host, gpus=[gpu], replaces=[kept, gone]
    )
    _stopped_elsewhere(gone, personas)
    services.do_apply(proposal, acting_user=personas["oncall"])
    applied = AuditEntry.objects.get(action="proposal.apply", object_id=str(proposal.pk))
    assert sorted(applied.before["replaces"]) == sorted([kept.pk, gone.pk])
    assert applied.after["replaces"] == [kept.pk]
    services.do_roll_back(proposal, acting_user=personas["oncall"], comment="P99 worse")
    kept.refresh_from_db()
    gone.refresh_from_db()
    assert (kept.status, gone.status) == (Deployment.Status.ACTIVE, Deployment.Status.STOPPED)


def test_an_edit_after_a_replaced_deployment_stopped_drops_it_and_keeps_the_rest(personas):
    gpu = GpuFactory()
    kept, gone = _replicas_on(gpu)
    proposal = create_proposal(personas["oncall"], host=gpu.host, gpus=[gpu], replaces=[kept, gone])
    _stopped_elsewhere(gone, personas)
    edited = services.do_edit_proposal(
        proposal, acting_user=personas["oncall"], expected_request_rate=7.0
    )
    assert list(edited.replaces.all()) == [kept]
    edit = AuditEntry.objects.get(action="proposal.edit", object_id=str(proposal.pk))
    assert (sorted(edit.before["replaces"]), edit.after["replaces"]) == (
        sorted([kept.pk, gone.pk]),
        [kept.pk],
    )


def test_only_running_deployments_of_the_host_can_be_replaced(personas):
    gpu = GpuFactory()
    elsewhere = DeploymentFactory()
    stopped = DeploymentFactory(host=gpu.host, status=Deployment.Status.STOPPED)
    for wrong in (elsewhere, stopped):
        with pytest.raises(ValidationError, match="can be replaced"):
            create_proposal(personas["oncall"], host=gpu.host, gpus=[gpu], replaces=[wrong])
