"""Degradation that runs: a card past its limit gets the plan of decisions.degradation.

The entry point for alerting is `on_card_over_limit(card_pk)` (or the Celery task
`operations.on_card_over_limit`); the watch calls it for every card whose newest sample is
at DEGRADATION_LIMIT or more (the on-demand part's limit decides, see decisions.degradation),
and for every OOM event. With a standing degradation policy the
plan's actions go to the agent at once; without one they wait for an approver, and a
proposal with the plan pre-filled is opened for the change it makes to the inventory.
"""

from __future__ import annotations

import datetime as dt
import logging
from fractions import Fraction

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from console.core.auditing import Action
from console.core.auditing.changes import audited, open_change, record_created
from console.operations import services
from console.operations.decisions import degradation as decisions
from console.operations.models import DegradationRun, HostAction, StandingPolicy
from console.proposals.models import Proposal
from console.proposals.services import ProposalError, do_create_proposal
from inventory.analytics.kv import kv_bytes_per_token_per_card
from inventory.models import CardRefusal, Deployment, Event, Gpu
from inventory.timeseries import queries

log = logging.getLogger(__name__)

FRESH = dt.timedelta(minutes=2)  # a sample older than this says nothing about now
SYSTEM_USERNAME = "console-operations"  # the author of the proposals the console opens


def policy_of(standing: StandingPolicy | None) -> decisions.Policy:
    params = standing.params if standing else {}
    return decisions.Policy(
        limit_fraction=settings.DEGRADATION_LIMIT,
        target_fraction=settings.DEGRADATION_TARGET,
        kv_floor_fraction=float(params.get("kv_floor_fraction", 0.5)),
        kv_floor_bytes=int(params.get("kv_floor_bytes", 0)),
        allow_evict=bool(params.get("allow_evict", True)),
    )


def card_state(gpu: Gpu, event: Event | None = None) -> decisions.Card | None:
    """The card as the newest samples show it; after an OOM, at least what the failed
    allocation needed (the process that asked is gone, its demand is not)."""
    sample = queries.latest_card_samples([gpu.pk], FRESH).get(gpu.pk)
    total = (sample or {}).get("total_bytes") or gpu.memory_total_bytes
    used = (sample or {}).get("used_last") or 0
    if event is not None:
        detail = event.detail or {}
        requested, free = detail.get("requested_bytes"), detail.get("free_bytes")
        if isinstance(requested, int) and isinstance(free, int):
            used = max(used, total - free + requested)
    elif sample is None:
        return None
    held = queries.latest_process_memory([gpu.pk], FRESH)
    tenants = []
    for deployment in (
        gpu.deployments.exclude(status=Deployment.Status.STOPPED)
        .select_related("served_model")
        .prefetch_related("gpus")
    ):
        model = deployment.served_model
        cards = max(1, len(deployment.gpus.all()))
        tenants.append(
            decisions.Tenant(
                deployment.pk,
                deployment.runtime_name,
                model.priority,
                held.get((gpu.pk, deployment.pk), 0),
                deployment.kv_reservation_bytes,
                kv_card_share(deployment),
                model.engine,
                model.weights_bytes // cards,
            )
        )
    reserved = (sample or {}).get("reserved_last") or 0
    return decisions.Card(int(total), int(used), tuple(tenants), int(reserved))


def kv_card_share(deployment: Deployment) -> Fraction:
    """Of each byte of the deployment's KV reservation, what one of its cards holds: the
    ledger's per-card figure (kv_reservation_per_card) as a share, exact for any size."""
    shape = deployment.served_model.kv_shape()
    tensor, pipeline = deployment.tensor_parallel, max(1, deployment.pipeline_parallel)
    if shape is None:
        return Fraction(1, max(1, tensor * pipeline))
    on_card = Fraction(str(kv_bytes_per_token_per_card(shape, tensor, pipeline)))
    return on_card / Fraction(str(shape.bytes_per_token()))


def operations_user():
    """The author of the proposals the console opens by itself: no login, no password."""
    user, _ = get_user_model().objects.get_or_create(
        username=SYSTEM_USERNAME, defaults={"is_active": False}
    )
    return user


def on_card_over_limit(card_pk: int, *, event_pk: int | None = None) -> DegradationRun | None:
    """Degrade a card past its limit (idempotent: a card already being degraded, or an event
        already handled, starts nothing new; nor does a card refusing new loads until a person
    clears it). None when the card is within its limit, or its host holds no secret."""
    gpu = Gpu.objects.select_related("host").get(pk=card_pk)
    if not gpu.host.holds_secret:
        # Its figures may be anyone's: a forged 98% must not shrink or stop a tenant.
        return None
    event = Event.objects.filter(pk=event_pk).first() if event_pk else None
    open_run = DegradationRun.objects.filter(
        gpu=gpu,
        state__in=[DegradationRun.State.ACTING, DegradationRun.State.AWAITING_APPROVAL],
    ).first()
    if open_run is not None:
        return open_run
    if CardRefusal.objects.filter(gpu=gpu, cleared_at__isnull=True).exists():
        # An earlier run did all its policy allows and the card waits for a person: another
        # run would shrink the same tenant again, each time below the last run's floor.
        return None
    if event is not None and DegradationRun.objects.filter(event=event).exists():
        return None
    card = card_state(gpu, event)
    if card is None:
        return None
    standing = services.active_policy(gpu.host, StandingPolicy.Kind.DEGRADATION)
    plan = decisions.decide(card, policy_of(standing))
    if not plan.over_limit:
        return None
    return _start(gpu, event, plan, standing)


def _start(gpu, event, plan: decisions.Plan, standing) -> DegradationRun:
    with open_change():
        run = DegradationRun.objects.create(
            host=gpu.host,
            gpu=gpu,
            trigger=DegradationRun.Trigger.OOM if event else DegradationRun.Trigger.USAGE,
            event=event,
            total_bytes=plan.total_bytes,
            used_before_bytes=plan.used_bytes,
            limit_fraction=settings.DEGRADATION_LIMIT,
            plan=plan.as_json(),
            projected_after_bytes=plan.projected_bytes,
            state=(
                DegradationRun.State.ACTING if standing else DegradationRun.State.AWAITING_APPROVAL
            ),
        )
        proposal = None if standing else _proposal_for(gpu, plan)
        for step in plan.steps:
            deployment = (
                None
                if step.kind == decisions.REFUSE
                else Deployment.objects.get(pk=step.deployment_id)
            )
            if deployment is None or not deployment.runtime_name:
                # The agent acts on a runtime name: a tenant without one cannot be shrunk or
                # stopped from here, so the card refuses new loads until a person looks.
                services.do_set_refusal(
                    gpu, reason_code="degradation", params={"run": run.pk, "card": gpu.index}
                )
                continue
            if step.kind == decisions.SHRINK_KV:
                action, params = "reload_with", step.reload
            else:
                action, params = "stop", {}
            run.actions.add(
                services.do_request_action(
                    acting_user=None,
                    host=gpu.host,
                    action=action,
                    deployment=deployment,
                    params=params,
                    origin=HostAction.Origin.DEGRADATION,
                    policy=standing,
                    proposal=proposal,
                )
            )
        if proposal is not None:
            run.proposal = proposal
            run.save(update_fields=["proposal"])
        record_created(run, Action.DEGRADATION_START, None, host=gpu.host)
    log.info("degrading %s: %s", gpu, [s.kind for s in plan.steps])
    return run


def _proposal_for(gpu: Gpu, plan: decisions.Plan):
    """The first inventory change of the plan as a draft proposal, for on-call to submit."""

    step = next((s for s in plan.steps if s.kind != decisions.REFUSE), None)
    if step is None:
        return None
    deployment = Deployment.objects.select_related("served_model").get(pk=step.deployment_id)
    resize = step.kind == decisions.SHRINK_KV
    try:
        return do_create_proposal(
            acting_user=operations_user(),
            gpus=list(deployment.gpus.all()),
            action=Proposal.Action.RESIZE if resize else Proposal.Action.REMOVE,
            served_model=deployment.served_model,
            host=gpu.host,
            deployment=deployment,
            mig_slice=deployment.mig_slice,
            isolation_mode=deployment.isolation_mode,
            mps_active_thread_percentage=deployment.mps_active_thread_percentage,
            kv_reservation_bytes=step.kv_to_bytes if resize else deployment.kv_reservation_bytes,
            kv_reservation_basis=deployment.kv_reservation_basis,
            kv_tokens_per_request=deployment.kv_tokens_per_request,
            admission_policy=deployment.admission_policy,
            rationale=(
                f"Degradation: {gpu} at {plan.used_bytes / plan.total_bytes:.0%} of its "
                f"memory. Plan: {', '.join(s.kind for s in plan.steps)}."
            ),
        )
    except (ValidationError, ProposalError) as error:
        log.warning("no proposal for the degradation of %s: %s", gpu, error)
        return None


def settle(run: DegradationRun, now: dt.datetime) -> DegradationRun | None:
    """Once every action has its outcome and the card has had time to settle, record its
    memory after and whether it is below its limit again."""
    actions = list(run.actions.all())
    if not actions or any(not a.finished for a in actions):
        return None
    last = max(a.finished_at for a in actions if a.finished_at)
    if now - last < dt.timedelta(seconds=settings.OPERATIONS_SETTLE_S):
        return None
    sample = queries.latest_card_samples([run.gpu_id], FRESH).get(run.gpu_id)
    if sample is None or sample["ts"] <= last:
        return None
    card = card_state(run.gpu)
    with open_change():
        if run.proposal_id is None:  # a proposal changes the inventory when it is applied
            for action in actions:
                _record_in_inventory(run, action)
        with audited(run, Action.DEGRADATION_SETTLE, None, host=run.host):
            run.used_after_bytes = sample["used_last"]
            recovered = card is not None and decisions.recovered(card, run.limit_fraction)
            run.state = (
                DegradationRun.State.RECOVERED if recovered else DegradationRun.State.NOT_RECOVERED
            )
            run.settled_at = now
            run.save(update_fields=["used_after_bytes", "state", "settled_at"])
    return run


def _record_in_inventory(run: DegradationRun, action: HostAction) -> None:
    """What a standing policy's action changed on the host, in the inventory too: the
    smaller reservation, or the stopped deployment (so gates and plans see what runs)."""
    if action.state != HostAction.State.SUCCEEDED or action.deployment_id is None:
        return
    deployment = Deployment.objects.select_for_update().get(pk=action.deployment_id)
    # The action speaks the engine's per-GPU terms; the inventory keeps the whole reservation.
    shrunk = next(
        (
            step["kv_to_bytes"]
            for step in run.plan
            if step["kind"] == decisions.SHRINK_KV and step["deployment_id"] == deployment.pk
        ),
        None,
    )
    resize = action.action == "reload_with" and shrunk is not None
    if not resize and action.action != "stop":
        return
    kind = Action.DEPLOYMENT_RESIZE if resize else Action.DEPLOYMENT_STOP
    with audited(deployment, kind, None, host=run.host,
                 comment=f"degradation of {run.gpu} (run {run.pk})"):  # fmt: skip
        if resize:
            deployment.kv_reservation_bytes = shrunk
        else:
            deployment.status = Deployment.Status.STOPPED
        deployment.save()
