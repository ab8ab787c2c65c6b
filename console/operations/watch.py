"""The watch beat runs every few seconds: it reacts to what the samples and events say and
moves every operation in flight one step on. Each step is idempotent, so two overlapping
watches (a slow one and the next) cannot do anything twice; a lock still keeps them apart."""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.db.models import Q

from console.operations import degradation, mps_recovery, off_peak, services
from console.operations.models import DegradationRun, HostAction, MpsRecovery
from inventory.analytics.memory_pressure import TenantMemory, card_pressure
from inventory.models import Deployment, Event, Gpu, Host
from inventory.timeseries import queries
from inventory.timeseries.locks import ProcessLock

log = logging.getLogger(__name__)

EVENT_HORIZON = dt.timedelta(minutes=15)  # events older than this are history, not alarms
APPROVED_PROPOSAL = ("approved", "applied", "verified")


def watch(now: dt.datetime) -> dict[str, int]:
    lock = ProcessLock("operations watch")
    if not lock.acquire():
        return {}
    try:
        return {
            "sent_for_proposals": _send_for_approved_proposals(),
            "timed_out": _time_out(now),
            "oom_reactions": _react_to_ooms(now),
            "over_limit": _cards_over_limit(),
            "settled": _settle_degradations(now),
            "mps": _advance_mps(now),
            "reloads": _advance_reloads(now),
        }
    finally:
        lock.release()


def _send_for_approved_proposals() -> int:
    waiting = HostAction.objects.filter(
        state=HostAction.State.AWAITING_APPROVAL, proposal__state__in=APPROVED_PROPOSAL
    )
    return sum(services.do_send_for_approved_proposal(a) is not None for a in waiting)


def _time_out(now: dt.datetime) -> int:
    late = HostAction.objects.filter(
        state=HostAction.State.SENT,
        sent_at__lt=now - dt.timedelta(seconds=settings.OPERATIONS_OUTCOME_TIMEOUT_S),
    )
    return sum(services.do_time_out_action(a) is not None for a in late)


def _react_to_ooms(now: dt.datetime) -> int:
    started = 0
    recent = Event.objects.filter(at__gt=now - EVENT_HORIZON, gpu__isnull=False)
    handled_ooms = DegradationRun.objects.filter(event__isnull=False).values("event_id")
    for event in recent.filter(kind=Event.Kind.OOM).exclude(pk__in=handled_ooms):
        started += _reacted(
            f"OOM event {event.pk}", degradation.on_card_over_limit, event.gpu_id, event_pk=event.pk
        )
    handled_mps = MpsRecovery.objects.values("event_id")
    for event in recent.filter(kind=Event.Kind.MPS_SERVER_DOWN).exclude(pk__in=handled_mps):
        started += _reacted(
            f"MPS server down event {event.pk}", mps_recovery.on_mps_server_down, event.pk
        )
    return started


def _reacted(what: str, react, *args, **kwargs) -> bool:
    """One reaction; a failure is logged and leaves the others to run (each reaction is a
    change of its own, rolled back alone)."""
    try:
        return react(*args, **kwargs) is not None
    except Exception:
        log.exception("reacting to %s failed", what)
        return False


def _cards_over_limit() -> int:
    """Cards past the on-demand limit (inventory.analytics.memory_pressure), judged for the
    whole fleet in three queries: a card whose preallocated pools alone fill it to 95% by NVML
    is no candidate, so it costs no per-card reading every pass."""
    gpus = list(
        Gpu.objects.filter(host__status=Host.Status.ACTIVE).values_list("pk", "memory_total_bytes")
    )
    latest = queries.latest_card_samples([pk for pk, _ in gpus], dt.timedelta(minutes=1))
    nvml_over = {}
    for pk, inventory_total in gpus:
        sample = latest.get(pk)
        if sample and sample["used_last"] is not None:
            total = sample["total_bytes"] or inventory_total
            if sample["used_last"] >= settings.DEGRADATION_LIMIT * total:
                nvml_over[pk] = (total, sample)
    held = queries.latest_process_memory(list(nvml_over), dt.timedelta(minutes=1))
    engines = dict(
        Deployment.objects.filter(pk__in={d for _, d in held})
        .exclude(status=Deployment.Status.STOPPED)
        .values_list("pk", "served_model__engine")
    )
    tenants: dict[int, list[TenantMemory]] = {}
    for (gpu_pk, deployment_pk), held_bytes in held.items():
        engine = engines.get(deployment_pk, "other")  # a stopped one's memory is on demand
        tenants.setdefault(gpu_pk, []).append(TenantMemory(str(deployment_pk), engine, held_bytes))
    started = 0
    for pk, (total, sample) in nvml_over.items():
        pressure = card_pressure(
            total,
            sample["used_last"],
            tenants.get(pk, ()),
            settings.DEGRADATION_LIMIT,
            sample["reserved_last"] or 0,
        )
        if sample["used_last"] >= pressure.limit_bytes:
            started += _reacted(f"card {pk} over its limit", degradation.on_card_over_limit, pk)
    return started


def _settle_degradations(now: dt.datetime) -> int:
    open_runs = DegradationRun.objects.filter(
        Q(state=DegradationRun.State.ACTING) | Q(state=DegradationRun.State.AWAITING_APPROVAL)
    ).select_related("host", "gpu")
    return sum(degradation.settle(run, now) is not None for run in open_runs)


def _advance_mps(now: dt.datetime) -> int:
    active = MpsRecovery.objects.filter(
        state__in=[MpsRecovery.State.RESTARTING, MpsRecovery.State.AWAITING_CLIENTS]
    ).select_related("host", "gpu")
    for recovery in active:
        mps_recovery.advance(recovery, now)
    return len(active)


def _advance_reloads(now: dt.datetime) -> int:
    plans = list(off_peak.due_plans(now))
    for plan in plans:
        off_peak.advance(plan, now)
    return len(plans)
