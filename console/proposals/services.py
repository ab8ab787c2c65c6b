"""Every change to a proposal, and the inventory changes it makes, goes through here.

One change (a durable transaction and one change id) per action, with its audit rows;
notifications and gate checks are queued to run after the commit, so a broker or mail
server that is down never blocks the workflow.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from console.core.auditing import Action, changed_fields, snapshot
from console.core.auditing.changes import (
    AuditRow,
    atomic_change,
    audited,
    current_change,
    record,
    record_created,
)
from console.proposals import notifications, queue
from console.proposals.gates import Checked, Gate
from console.proposals.gates.loadtest_report import LoadTestRun
from console.proposals.models import Decision, GateResult, LoadTest, Proposal
from console.proposals.transitions import Event, State, next_state
from inventory.analytics.reasons import as_stored, render
from inventory.models import Deployment, Host
from inventory.placement_state import current_placement


class ProposalError(Exception):
    """A rule of the workflow refused the change; the message says which and why."""


class FourEyesError(ProposalError):
    pass


class CommentRequired(ProposalError):
    pass


# How the engine sizes its memory (inventory.models.fleet.EngineSettings), for gate 5.
ENGINE_SETTINGS = (
    "engine_memory_fraction",
    "engine_kv_cache_bytes",
    "engine_overhead_bytes",
    "engine_context_tokens",
    "engine_version",
    "staggered_start",
)
EDITABLE = (
    "action",
    "served_model",
    "host",
    "deployment",
    "let_solver_choose",
    "card_count",
    "mig_slice",
    "isolation_mode",
    "mps_active_thread_percentage",
    "kv_reservation_bytes",
    "kv_reservation_basis",
    "kv_tokens_per_request",
    "expected_p95_concurrency",
    "expected_request_rate",
    "admission_policy",
    "canary_share_pct",
    "rollout_steps",
    "rationale",
    *ENGINE_SETTINGS,
)
# Copied from the proposal onto the deployment when it is applied.
DEPLOYMENT_FIELDS = (
    "host",
    "isolation_mode",
    "mig_slice",
    "kv_reservation_bytes",
    "kv_reservation_basis",
    "kv_tokens_per_request",
    "admission_policy",
    *ENGINE_SETTINGS,
)


def _locked(proposal: Proposal) -> Proposal:
    # Only the proposal's row: the model and host it joins stay free for everyone else.
    return (
        Proposal.objects.select_for_update(of=("self",))
        .select_related("served_model", "host")
        .get(pk=proposal.pk)
    )


def _move(proposal: Proposal, event: Event) -> None:
    proposal.state = next_state(proposal.state, event)


def _queue_checks(proposal: Proposal) -> None:
    pk, revision = proposal.pk, proposal.revision
    # A change the demo replays at a past moment is checked as of that moment.
    change = current_change()
    at = (change.at.isoformat(),) if change and change.at else ()
    transaction.on_commit(lambda: queue.queue_gate_checks(pk, revision, *at))


def _acknowledge(proposal: Proposal, acting_user, acknowledged: bool | None) -> None:
    if acknowledged is None:
        return
    if not acknowledged:
        proposal.mps_acknowledged_by, proposal.mps_acknowledged_at = None, None
    elif proposal.mps_acknowledged_at is None:
        proposal.mps_acknowledged_by, proposal.mps_acknowledged_at = acting_user, timezone.now()


@atomic_change
def do_create_proposal(
    *,
    acting_user,
    gpus=(),
    replaces=(),
    mps_acknowledged: bool = False,
    submit: bool = False,
    **fields,
) -> Proposal:
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise TypeError(f"not a proposal field: {', '.join(sorted(unknown))}")
    proposal = Proposal(author=acting_user, **fields)
    _acknowledge(proposal, acting_user, mps_acknowledged)
    proposal.full_clean()
    proposal.validate_cards(list(gpus))
    proposal.validate_replaced(list(replaces))
    proposal.save()
    proposal.gpus.set(gpus)
    proposal.replaces.set(replaces)
    record_created(proposal, Action.PROPOSAL_CREATE, acting_user, host=proposal.host)
    if submit:
        _submit(proposal, acting_user)
    return proposal


def _void_approvals(proposal: Proposal, reason: str) -> int:
    return Decision.objects.filter(
        proposal=proposal, kind=Decision.Kind.APPROVE, voided_at__isnull=True
    ).update(voided_at=timezone.now(), voided_reason=reason[:200])


def revise(proposal: Proposal, row: AuditRow) -> None:
    """A new revision: earlier checks and approvals stop counting; checks run again.

    Called inside the `audited` block of the change that revises it, whose row then says how
    many approvals the revision voids.
    """
    proposal.state = next_state(proposal.state, Event.EDIT)
    proposal.revision += 1
    proposal.save()
    voided = _void_approvals(proposal, f"edited to revision {proposal.revision}")
    if voided:
        row.comment = f"{row.comment} (voids {voided} approval{'s' if voided > 1 else ''})".strip()
    if proposal.state == State.SUBMITTED:
        _queue_checks(proposal)  # runs once the change commits, after the row is written


@atomic_change
def do_edit_proposal(
    proposal: Proposal,
    *,
    acting_user,
    gpus=None,
    replaces=None,
    mps_acknowledged: bool | None = None,
    **changes,
) -> Proposal:
    """Change a proposal; `gpus` and `replaces` left None keep what it has. The audit row's
    before and after hold both many-to-manys, so a change of what it replaces shows there."""
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise TypeError(f"not editable: {', '.join(sorted(unknown))}")
    current = _locked(proposal)
    next_state(current.state, Event.EDIT)  # refuses an edit after the decision, before changing
    # An edit that changes nothing makes no revision, and so no row.
    with audited(current, Action.PROPOSAL_EDIT, acting_user, only_if_changed=True) as row:
        for field, value in changes.items():
            setattr(current, field, value)
        _acknowledge(current, acting_user, mps_acknowledged)
        cards = list(gpus) if gpus is not None else list(current.gpus.all())
        if replaces is None:
            # One that has stopped since is no longer replaced, as the edit form no longer
            # offers it; the audit row's before and after show it go.
            replaces = current.replaces.exclude(status=Deployment.Status.STOPPED)
        replaced = list(replaces)
        current.full_clean()
        current.validate_cards(cards)
        # Checked even when unchanged: a move to another host leaves its replicas behind.
        current.validate_replaced(replaced)
        current.gpus.set(cards)
        current.replaces.set(replaced)
        if changed_fields(row.before, snapshot(current)):
            row.host = current.host  # the host as edited: the edit may move the proposal
            revise(current, row)
    return current


def _submit(proposal: Proposal, acting_user) -> None:
    with audited(proposal, Action.PROPOSAL_SUBMIT, acting_user, host=proposal.host):
        _move(proposal, Event.SUBMIT)
        proposal.save()
    _queue_checks(proposal)


@atomic_change
def do_submit(proposal: Proposal, *, acting_user) -> Proposal:
    current = _locked(proposal)
    _submit(current, acting_user)
    return current


@atomic_change
def do_attach_load_test(
    proposal: Proposal, *, acting_user, run: LoadTestRun, files: list[str]
) -> LoadTest:
    current = _locked(proposal)
    next_state(current.state, Event.EDIT)
    with audited(current, Action.PROPOSAL_LOAD_TEST, acting_user, host=current.host,
                 comment=f"attached {', '.join(files)}") as row:  # fmt: skip
        load_test = LoadTest.objects.create(
            proposal=current,
            uploaded_by=acting_user,
            source_format=run.source_format,
            files=files,
            run=run.to_json(),
        )
        revise(current, row)
    return load_test


@atomic_change
def do_start_checks(proposal_id: int, revision: int) -> Proposal | None:
    """Submitted -> checking; None when the proposal moved on (a later edit, a late message)."""
    current = Proposal.objects.select_for_update().filter(pk=proposal_id).first()
    if current is None or current.revision != revision:
        return None
    if current.state == State.CHECKING:
        return current  # redelivered after a worker died mid-check: check again
    if current.state != State.SUBMITTED:
        return None
    with audited(current, Action.PROPOSAL_START_CHECKS, None, host=current.host):
        _move(current, Event.START_CHECKS)
        current.save()
    return current


@atomic_change
def do_record_gate_results(proposal_id: int, revision: int, checked: Checked) -> Proposal | None:
    """Store the gates' results; ready for approval when all pass, else back to the author."""
    current = Proposal.objects.select_for_update().filter(pk=proposal_id).first()
    if current is None or current.revision != revision or current.state != State.CHECKING:
        return None
    failed = [outcome for outcome in checked.outcomes if not outcome.status.passed]
    comment = "; ".join(f"{o.gate.title}: {render(o.summary)}" for o in failed)[:2000]
    action = Action.PROPOSAL_CHECKS_FAILED if failed else Action.PROPOSAL_CHECKS_PASSED
    with audited(current, action, None, host=current.host, comment=comment):
        _store_results(current, checked)
        _move(current, Event.CHECKS_FAILED if failed else Event.CHECKS_PASSED)
        current.save()
    if failed:
        notifications.notify_author(current, comment)
    else:
        notifications.notify_approvers(current)
    return current


def _store_results(proposal: Proposal, checked: Checked) -> None:
    GateResult.objects.filter(proposal=proposal, revision=proposal.revision).delete()
    GateResult.objects.bulk_create(
        GateResult(
            proposal=proposal,
            revision=proposal.revision,
            gate=outcome.gate,
            status=outcome.status,
            summary=render(outcome.summary),
            summary_reason=as_stored(outcome.summary),
            reasons=[as_stored(reason) for reason in outcome.reasons],
            numbers=outcome.numbers,
            evidence=outcome.evidence,
            runbook_slug=outcome.runbook_slug,
        )
        for outcome in checked.outcomes
    )
    if proposal.let_solver_choose:
        proposal.solver_gpus.set(checked.solver_gpus)


def current_results(proposal: Proposal) -> list[GateResult]:
    return list(proposal.gate_results.filter(revision=proposal.revision).order_by("id"))


_DECISION_ACTIONS = {
    Decision.Kind.APPROVE: Action.PROPOSAL_APPROVE,
    Decision.Kind.REJECT: Action.PROPOSAL_REJECT,
    Decision.Kind.REQUEST_CHANGES: Action.PROPOSAL_REQUEST_CHANGES,
}


def _decide(proposal: Proposal, *, acting_user, kind: str, event: Event, comment: str) -> Proposal:
    current = _locked(proposal)
    with audited(current, _DECISION_ACTIONS[kind], acting_user, host=current.host,
                 comment=comment):  # fmt: skip
        _move(current, event)
        Decision.objects.create(
            proposal=current,
            revision=current.revision,
            kind=kind,
            decided_by=acting_user,
            comment=comment,
            evidence=[result.as_evidence() for result in current_results(current)],
        )
        current.save()
    notifications.notify_author(current, comment, decided_by=acting_user)
    return current


@atomic_change
def do_approve_proposal(proposal: Proposal, *, acting_user, comment: str = "") -> Proposal:
    if proposal.author_id == acting_user.pk:
        raise FourEyesError("You wrote this proposal: someone else must approve it (four eyes).")
    current = _locked(proposal)
    next_state(current.state, Event.APPROVE)
    results = {result.gate: result for result in current_results(current)}
    unchecked = [gate.title for gate in Gate if gate not in results]
    failing = [r.title for r in results.values() if not r.passed]
    if unchecked or failing:
        raise ProposalError(
            f"Revision {current.revision} cannot be approved: "
            + ", ".join(
                [*(f"{t} not checked" for t in unchecked), *(f"{t} failed" for t in failing)]
            )
            + "."
        )
    return _decide(
        current, acting_user=acting_user, kind="approve", event=Event.APPROVE, comment=comment
    )


def _require_comment(comment: str, what: str) -> str:
    comment = (comment or "").strip()
    if not comment:
        raise CommentRequired(f"{what} needs a comment saying why.")
    return comment


@atomic_change
def do_reject(proposal: Proposal, *, acting_user, comment: str) -> Proposal:
    comment = _require_comment(comment, "A rejection")
    return _decide(
        proposal, acting_user=acting_user, kind="reject", event=Event.REJECT, comment=comment
    )


@atomic_change
def do_request_changes(proposal: Proposal, *, acting_user, comment: str) -> Proposal:
    comment = _require_comment(comment, "Sending a proposal back")
    return _decide(
        proposal,
        acting_user=acting_user,
        kind="request_changes",
        event=Event.REQUEST_CHANGES,
        comment=comment,
    )


def _placement_json(host) -> list:
    request, answer = current_placement(host)
    return [request, answer]


def _record_deployment(deployment, *, actor, action: Action, before, proposal: Proposal) -> None:
    hosts = {deployment.host_id}
    if before is not None:
        hosts.add(before["host_id"])  # a move between hosts shows on both host pages
    for host_id in sorted(hosts):
        record(
            actor=actor,
            action=action,
            obj=deployment,
            before=before,
            after=snapshot(deployment),
            host=Host.objects.get(pk=host_id),
            comment=f"Proposal #{proposal.pk}: {proposal}",
        )


@atomic_change
def do_apply(proposal: Proposal, *, acting_user) -> Proposal:
    """Make the approved change in the inventory: create, move, resize or stop a deployment."""
    current = _locked(proposal)
    with audited(current, Action.PROPOSAL_APPLY, acting_user, host=current.host):
        _move(current, Event.APPLY)
        approved = current.decisions.filter(
            kind=Decision.Kind.APPROVE, revision=current.revision, voided_at__isnull=True
        ).exists()
        if not approved:
            raise ProposalError(f"Revision {current.revision} has no standing approval.")
        current.placement_before = _placement_json(current.host)
        deployment, deployment_before = _change_deployment(current, acting_user)
        _stop_replaced(current, acting_user)
        current.deployment, current.deployment_before = deployment, deployment_before
        current.placement_after = _placement_json(current.host)
        current.save()
    return current


def _change_deployment(proposal: Proposal, acting_user) -> tuple[Deployment, dict | None]:
    """The deployment the proposal creates or changes, and its snapshot before (None: new)."""
    targets = proposal.target_gpus()
    if proposal.action == Proposal.Action.ADD:
        deployment = Deployment(
            served_model=proposal.served_model,
            status=Deployment.Status.ACTIVE,
            mps_active_thread_percentage=proposal.thread_share_for(None),
            **{field: getattr(proposal, field) for field in DEPLOYMENT_FIELDS},
        )
        deployment.full_clean()
        deployment.save()
        deployment.gpus.set(targets)
        _record_deployment(
            deployment,
            actor=acting_user,
            action=Action.DEPLOYMENT_CREATE,
            before=None,
            proposal=proposal,
        )
        return deployment, None
    deployment = Deployment.objects.select_for_update().get(pk=proposal.deployment_id)
    # Kept on the proposal too, for its roll-back: not only the audit's picture.
    deployment_before = snapshot(deployment)
    if proposal.action == Proposal.Action.REMOVE:
        deployment.status = Deployment.Status.STOPPED
    else:
        deployment.mps_active_thread_percentage = proposal.thread_share_for(deployment)
        for field in DEPLOYMENT_FIELDS:
            setattr(deployment, field, getattr(proposal, field))
    deployment.full_clean()
    deployment.save()
    if proposal.action != Proposal.Action.REMOVE:
        deployment.gpus.set(targets)
    action = {
        Proposal.Action.MOVE: Action.DEPLOYMENT_MOVE,
        Proposal.Action.RESIZE: Action.DEPLOYMENT_RESIZE,
        Proposal.Action.REMOVE: Action.DEPLOYMENT_STOP,
    }[proposal.action]
    _record_deployment(deployment, actor=acting_user, action=action,
                       before=deployment_before, proposal=proposal)  # fmt: skip
    return deployment, deployment_before


def _stop_replaced(proposal: Proposal, acting_user) -> None:
    """The deployments the change took over from stop with it, each with its audit row. One
    that had stopped already was not taken over from: it leaves the proposal's list (the
    apply's audit row shows it), so that a rollback does not start it."""
    proposal.replaces.remove(*proposal.replaces.filter(status=Deployment.Status.STOPPED))
    for replaced in (
        Deployment.objects.select_for_update()
        .filter(pk__in=proposal.replaces.values("pk"))
        .exclude(status=Deployment.Status.STOPPED)
    ):
        before = snapshot(replaced)
        replaced.status = Deployment.Status.STOPPED
        replaced.save()
        _record_deployment(replaced, actor=acting_user, action=Action.DEPLOYMENT_STOP,
                           before=before, proposal=proposal)  # fmt: skip


@atomic_change
def do_verify(proposal: Proposal, *, acting_user, comment: str = "") -> Proposal:
    current = _locked(proposal)
    with audited(current, Action.PROPOSAL_VERIFY, acting_user, host=current.host,
                 comment=comment.strip()):  # fmt: skip
        _move(current, Event.VERIFY)
        current.save()
    return current


_RESTORED = ("id", "created_at", "updated_at", "gpus")


@atomic_change
def do_roll_back(proposal: Proposal, *, acting_user, comment: str) -> Proposal:
    """Undo an applied change: stop what it created, or put the deployment back as it was."""
    comment = _require_comment(comment, "A roll-back")
    current = _locked(proposal)
    with audited(current, Action.PROPOSAL_ROLL_BACK, acting_user, host=current.host,
                 comment=comment):  # fmt: skip
        _move(current, Event.ROLL_BACK)
        _restore_deployment(current, acting_user)
        # What the change took over from runs again, as it did before it was applied.
        for replaced in Deployment.objects.select_for_update().filter(
            pk__in=current.replaces.values("pk"), status=Deployment.Status.STOPPED
        ):
            replaced_before = snapshot(replaced)
            replaced.status = Deployment.Status.ACTIVE
            replaced.save()
            _record_deployment(replaced, actor=acting_user, action=Action.DEPLOYMENT_ROLL_BACK,
                               before=replaced_before, proposal=current)  # fmt: skip
        current.save()
    return current


def _restore_deployment(proposal: Proposal, acting_user) -> None:
    """Stop what the proposal created, or put its deployment back as it was before."""
    deployment = Deployment.objects.select_for_update().get(pk=proposal.deployment_id)
    deployment_before = snapshot(deployment)
    if proposal.deployment_before is None:
        deployment.status = Deployment.Status.STOPPED
        deployment.save()
    else:
        restored = proposal.deployment_before
        for attname, value in restored.items():
            if attname not in _RESTORED:
                setattr(deployment, attname, value)
        deployment.full_clean()
        deployment.save()
        deployment.gpus.set(restored.get("gpus", []))
    _record_deployment(deployment, actor=acting_user, action=Action.DEPLOYMENT_ROLL_BACK,
                       before=deployment_before, proposal=proposal)  # fmt: skip
