"""Every change host operations make goes through here: one change id, audit rows, and the
request sent to the agent only once the change committed."""

from __future__ import annotations

import datetime as dt
import uuid

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from console.core.access import require_permission
from console.core.auditing import Action
from console.core.auditing.changes import atomic_change, audited, record_created
from console.operations import messages
from console.operations.models import HostAction, StandingPolicy
from inventory.models import CardRefusal, Deployment, Gpu, Host
from inventory.telemetry import host_actions as ha


class OperationError(Exception):
    """A rule of host operations refused the change; the message says which."""


class FourEyesError(OperationError):
    pass


NO_SECRET = (
    "this host holds no secret: nothing it reports can be told from a forgery, so no host "
    "action, standing policy or degradation acts on it"
)


def _require_secret(host: Host) -> None:
    if not host.holds_secret:
        raise ValidationError({"host": NO_SECRET}, code="no_secret")


def active_policy(host: Host, kind: str) -> StandingPolicy | None:
    return StandingPolicy.objects.filter(host=host, kind=kind, revoked_at__isnull=True).first()


@atomic_change
def do_sign_policy(*, acting_user, host: Host, kind: str, params: dict | None = None):
    require_permission(acting_user, StandingPolicy, "sign")
    if kind not in StandingPolicy.Kind.values:
        raise ValidationError({"kind": f"not a policy kind: {kind!r}"})
    _require_secret(host)
    for earlier in StandingPolicy.objects.select_for_update().filter(
        host=host, kind=kind, revoked_at__isnull=True
    ):
        _revoke(earlier, acting_user)
    policy = StandingPolicy.objects.create(
        host=host, kind=kind, params=params or {}, signed_by=acting_user
    )
    record_created(policy, Action.POLICY_SIGN, acting_user, host=host)
    return policy


def _revoke(policy: StandingPolicy, acting_user) -> None:
    with audited(policy, Action.POLICY_REVOKE, acting_user, host=policy.host):
        policy.revoked_at, policy.revoked_by = timezone.now(), acting_user
        policy.save(update_fields=["revoked_at", "revoked_by"])


@atomic_change
def do_revoke_policy(policy: StandingPolicy, *, acting_user) -> StandingPolicy:
    require_permission(acting_user, StandingPolicy, "sign")
    policy = StandingPolicy.objects.select_for_update().get(pk=policy.pk)
    if policy.revoked_at is None:
        _revoke(policy, acting_user)
    return policy


def _target(host: Host, action: str, deployment, params: dict):
    if action in ha.DEPLOYMENT_ACTIONS:
        if deployment is None or deployment.host_id != host.pk or not deployment.runtime_name:
            raise ValidationError(
                {"deployment": "a deployment of this host with a runtime name is needed"}
            )
        return deployment, None
    gpu = Gpu.objects.filter(host=host, index=params.get("card_index")).first()
    if gpu is None:
        raise ValidationError({"card_index": "no such card on this host"})
    return None, gpu


def _send(action: HostAction, actor) -> None:
    # Asked for while the host held a secret, approved after it lost it: still not sent.
    if not action.host.holds_secret:
        raise OperationError(NO_SECRET)
    with audited(action, Action.HOST_ACTION_SEND, actor, host=action.host):
        now = timezone.now()
        action.state = HostAction.State.SENT
        action.sent_at = now
        action.expires_at = now + dt.timedelta(seconds=_ttl())
        action.save(update_fields=["state", "sent_at", "expires_at"])
    transaction.on_commit(lambda: messages.publish(action))


def _ttl() -> float:
    from django.conf import settings

    return settings.OPERATIONS_ACTION_TTL_S


@atomic_change
def do_request_action(
    *,
    acting_user,
    host: Host,
    action: str,
    deployment: Deployment | None = None,
    params: dict | None = None,
    origin: str = HostAction.Origin.MANUAL,
    policy: StandingPolicy | None = None,
    proposal=None,
    approved_by=None,
) -> HostAction:
    """Ask for a host action. With a standing policy, or approved already (an approved
    off-peak plan), it goes to the agent at once; otherwise it waits for an approver other
    than the one who asked, or for its proposal's approval."""
    if acting_user is not None:
        require_permission(acting_user, HostAction, "add")
    if action not in ha.ACTIONS:
        raise ValidationError({"action": f"not a host action: {action!r}"})
    _require_secret(host)
    try:
        checked = ha.check_params(action, params or {})
    except ha.RequestInvalid as invalid:
        raise ValidationError({"params": invalid.detail}) from None
    deployment, gpu = _target(host, action, deployment, checked)
    if policy is not None and (policy.host_id != host.pk or policy.revoked_at is not None):
        raise OperationError("that standing policy does not cover this host")
    request = HostAction.objects.create(
        request_id=uuid.uuid4(), host=host, deployment=deployment, gpu=gpu, action=action,
        params=checked, origin=origin, state=HostAction.State.AWAITING_APPROVAL,
        requested_by=acting_user, policy=policy, proposal=proposal, approved_by=approved_by,
    )  # fmt: skip
    record_created(request, Action.HOST_ACTION_REQUEST, acting_user, host=host)
    if policy is not None or approved_by is not None:
        _send(request, acting_user)
    return request


def _locked(action: HostAction) -> HostAction:
    return (
        HostAction.objects.select_for_update(of=("self",))
        .select_related("host", "deployment")
        .get(pk=action.pk)
    )


@atomic_change
def do_approve_action(action: HostAction, *, acting_user) -> HostAction:
    require_permission(acting_user, HostAction, "approve")
    if action.requested_by_id is not None and action.requested_by_id == acting_user.pk:
        raise FourEyesError("You asked for this action: someone else must approve it.")
    current = _locked(action)
    if current.state != HostAction.State.AWAITING_APPROVAL:
        raise OperationError(f"this action is {current.get_state_display().lower()}")
    with audited(current, Action.HOST_ACTION_APPROVE, acting_user, host=current.host):
        current.approved_by = acting_user
        current.save(update_fields=["approved_by"])
    _send(current, acting_user)
    return current


@atomic_change
def do_reject_action(action: HostAction, *, acting_user) -> HostAction:
    require_permission(acting_user, HostAction, "approve")
    current = _locked(action)
    if current.state != HostAction.State.AWAITING_APPROVAL:
        raise OperationError(f"this action is {current.get_state_display().lower()}")
    with audited(current, Action.HOST_ACTION_REJECT, acting_user, host=current.host):
        current.state, current.finished_at = HostAction.State.REJECTED, timezone.now()
        current.approved_by = acting_user
        current.save(update_fields=["state", "finished_at", "approved_by"])
    return current


@atomic_change
def do_send_for_approved_proposal(action: HostAction) -> HostAction | None:
    """An action waiting on a proposal goes out once an approver approved that proposal."""
    current = _locked(action)
    if current.state != HostAction.State.AWAITING_APPROVAL or current.proposal is None:
        return None
    _send(current, None)
    return current


def _epoch(value) -> dt.datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value, tz=dt.UTC)
    return None


@atomic_change
def do_record_outcome(outcome: dict) -> HostAction | None:
    """The agent's report. A second report of the same request (a redelivery) changes
    nothing but the count of deliveries."""
    try:
        request_id = uuid.UUID(str(outcome.get("request_id")))
    except ValueError:
        return None
    current = (
        HostAction.objects.select_for_update(of=("self",))
        .select_related("host")
        .filter(request_id=request_id, host__name=outcome.get("host"))
        .first()
    )
    if current is None:
        return None
    with audited(current, Action.HOST_ACTION_OUTCOME, None, host=current.host) as row:
        current.deliveries += 1
        fields = ["deliveries"]
        if not current.finished:
            _take_outcome(current, outcome)
            fields += ["state", "reason_code", "detail", "exit_code", "output_tail", "finished_at"]
        current.save(update_fields=fields)
        row.comment = "delivered again" if current.deliveries > 1 else ""
    return current


def _take_outcome(current: HostAction, outcome: dict) -> None:
    current.state = outcome["state"]
    current.reason_code = str(outcome.get("reason_code") or "")[:32]
    current.detail = str(outcome.get("detail") or "")[:500]
    exit_code = outcome.get("exit_code")
    current.exit_code = exit_code if isinstance(exit_code, int) else None
    current.output_tail = str(outcome.get("output_tail") or "")[-ha.OUTPUT_TAIL_CHARS :]
    current.finished_at = _epoch(outcome.get("finished_at")) or timezone.now()


@atomic_change
def do_time_out_action(action: HostAction) -> HostAction | None:
    """A request the agent never answered: after the timeout, it counts as timed out."""
    current = _locked(action)
    if current.state != HostAction.State.SENT:
        return None
    with audited(current, Action.HOST_ACTION_OUTCOME, None, host=current.host,
                 comment="no outcome from the agent"):  # fmt: skip
        current.state, current.reason_code = HostAction.State.TIMED_OUT, "no_outcome"
        current.finished_at = timezone.now()
        current.save(update_fields=["state", "reason_code", "finished_at"])
    return current


@atomic_change
def do_set_refusal(gpu: Gpu, *, reason_code: str, params: dict | None = None) -> CardRefusal:
    existing = CardRefusal.objects.filter(gpu=gpu, cleared_at__isnull=True).first()
    if existing is not None:
        return existing
    refusal = CardRefusal.objects.create(gpu=gpu, reason_code=reason_code, params=params or {})
    record_created(refusal, Action.CARD_REFUSAL_SET, None, host=gpu.host)
    return refusal


@atomic_change
def do_clear_refusal(refusal: CardRefusal, *, acting_user) -> CardRefusal:
    if not acting_user.has_perm("operations.approve_hostaction"):
        raise PermissionDenied("Your role may not clear a card's refusal of new loads.")
    current = CardRefusal.objects.select_for_update().select_related("gpu__host").get(pk=refusal.pk)
    if current.cleared_at is None:
        with audited(current, Action.CARD_REFUSAL_CLEAR, acting_user, host=current.gpu.host):
            current.cleared_at, current.cleared_by = timezone.now(), acting_user
            current.save(update_fields=["cleared_at", "cleared_by"])
    return current
