"""Off-peak reloads: plan them from 30 days of history, run them in the window once an
approver approved, and record each card's fragmentation before and after."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db.models import Q

from console.core.access import require_permission
from console.core.auditing import Action
from console.core.auditing.changes import atomic_change, audited, open_change, record_created
from console.operations import services
from console.operations.decisions import defrag as decisions
from console.operations.models import DefragPlan, DefragReload, HostAction, HostHistorySummary
from console.operations.services import OperationError
from inventory.models import Deployment, Gpu, Host
from inventory.timeseries import operations as samples

HISTORY = dt.timedelta(days=30)
FRESH = dt.timedelta(minutes=5)
SUMMARY_MAX_AGE = dt.timedelta(hours=24)


def thresholds() -> decisions.Thresholds:
    return decisions.Thresholds(
        window_hours=settings.DEFRAG_WINDOW_HOURS,
        fragmentation_index=settings.FRAGMENTATION_RED,
        reload_minutes=settings.DEFRAG_RELOAD_MINUTES,
    )


def refresh_summaries(hosts: list[Host], now: dt.datetime) -> int:
    """Sum up the last 30 days of the hosts whose summary is a day old or missing (two
    scans of the hourly rollups for all of them together); how many were refreshed."""
    fresh = set(
        HostHistorySummary.objects.filter(
            host__in=hosts, computed_at__gt=now - SUMMARY_MAX_AGE
        ).values_list("host_id", flat=True)
    )
    stale = [host.pk for host in hosts if host.pk not in fresh]
    if not stale:
        return 0
    start = (now - HISTORY).replace(hour=0, minute=0, second=0, microsecond=0)
    loads: dict[int, list] = {}
    for row in samples.weekly_host_load(stale, start, now):
        profile = loads.setdefault(row["host_id"], [None] * decisions.WEEK_HOURS)
        profile[row["slot"]] = row["load"]
    first_day = int(start.timestamp() // 86400)
    days = int(now.timestamp() // 86400) - first_day + 1
    peaks: dict[int, dict[str, list]] = {}
    host_of = dict(Gpu.objects.filter(host_id__in=stale).values_list("pk", "host_id"))
    for row in samples.daily_fragmentation_peaks(stale, start, now):
        cards = peaks.setdefault(host_of[row["gpu_id"]], {})
        series = cards.setdefault(str(row["gpu_id"]), [None] * days)
        index = row["day"] - first_day
        if 0 <= index < days:
            series[index] = row["fragmentation"]
    summaries = [
        HostHistorySummary(
            host_id=pk,
            computed_at=now,
            first_day=first_day,
            weekly_load=loads.get(pk, [None] * decisions.WEEK_HOURS),
            fragmentation_peaks=peaks.get(pk, {}),
        )
        for pk in stale
    ]
    HostHistorySummary.objects.bulk_create(
        summaries,
        update_conflicts=True,
        unique_fields=["host"],
        update_fields=["computed_at", "first_day", "weekly_load", "fragmentation_peaks"],
    )
    return len(summaries)


def host_histories(hosts: list[Host], now: dt.datetime) -> list[decisions.HostHistory]:
    """What the planner needs of each host: its summary (refreshed where a day old) and its
    processes' allocator reserve now."""
    refresh_summaries(hosts, now)
    summaries = {s.host_id: s for s in HostHistorySummary.objects.filter(host__in=hosts)}
    ids = [host.pk for host in hosts]
    # Plain rows, not model instances: at a thousand hosts the ORM objects cost seconds.
    deployments = (
        Deployment.objects.filter(host_id__in=ids)
        .exclude(status=Deployment.Status.STOPPED)
        .exclude(runtime_name="")
        .values_list("pk", "host_id", "runtime_name")
    )
    on_host: dict[int, list[tuple[int, str]]] = {}
    for pk, host_id, runtime_name in deployments:
        on_host.setdefault(host_id, []).append((pk, runtime_name))
    gpus_of: dict[int, list[int]] = {}
    for deployment_id, gpu_id in Deployment.gpus.through.objects.filter(
        deployment__host_id__in=ids
    ).values_list("deployment_id", "gpu_id"):
        gpus_of.setdefault(deployment_id, []).append(gpu_id)
    gpu_ids = [g for ids_ in gpus_of.values() for g in ids_]
    reserve: dict[int, int] = {}
    for row in samples.allocator_now(gpu_ids, now - FRESH):
        reserve[row["deployment_id"]] = reserve.get(row["deployment_id"], 0) + (row["reserve"] or 0)
    histories = []
    for host in hosts:
        summary = summaries.get(host.pk)
        peaks = summary.fragmentation_peaks if summary else {}
        cards = tuple(
            decisions.CardHistory(gpu.pk, gpu.memory_total_bytes, tuple(peaks.get(str(gpu.pk), ())))
            for gpu in host.gpus.all()
        )
        residents = tuple(
            decisions.Resident(pk, name, tuple(gpus_of.get(pk, ())), reserve.get(pk, 0))
            for pk, name in on_host.get(host.pk, ())
        )
        weekly = tuple(summary.weekly_load) if summary else (None,) * decisions.WEEK_HOURS
        histories.append(decisions.HostHistory(host.pk, weekly, cards, residents))
    return histories


def plan_for(host: Host, now: dt.datetime) -> DefragPlan | None:
    """Propose the next trough's reloads, unless a plan for this host is still to come."""
    pending = DefragPlan.objects.filter(
        host=host,
        state__in=[DefragPlan.State.PROPOSED, DefragPlan.State.APPROVED, DefragPlan.State.RUNNING],
    )
    if pending.filter(window_end__gt=now).exists():
        return None
    history = host_histories([host], now)[0]
    planned = decisions.plan_host(history, now.timestamp(), thresholds())
    if not planned.reloads:
        return None
    with open_change():
        plan = DefragPlan.objects.create(
            host=host,
            window_start=_at(planned.window_start),
            window_end=_at(planned.window_end),
            estimated_bytes=planned.estimated_bytes,
            basis={
                "trough_load": planned.trough_load,
                "window_hours": thresholds().window_hours,
                "deferred": list(planned.deferred),
            },
        )
        for reload in planned.reloads:
            DefragReload.objects.create(
                plan=plan,
                deployment_id=reload.deployment_id,
                gpu_id=reload.gpu_id,
                order=reload.order,
                not_before=_at(reload.not_before),
                reason=reload.reason,
                estimated_bytes=reload.estimated_bytes,
            )
        record_created(plan, Action.DEFRAG_PLAN, None, host=host)
    return plan


def _at(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


@atomic_change
def do_decide_plan(plan: DefragPlan, *, acting_user, approve: bool) -> DefragPlan:
    require_permission(acting_user, DefragPlan, "approve")
    current = DefragPlan.objects.select_for_update().get(pk=plan.pk)
    if current.state != DefragPlan.State.PROPOSED:
        raise OperationError(f"this plan is {current.get_state_display().lower()}")
    with audited(current, Action.DEFRAG_DECIDE, acting_user, host=current.host):
        current.state = DefragPlan.State.APPROVED if approve else DefragPlan.State.REJECTED
        current.decided_by, current.decided_at = acting_user, dt.datetime.now(tz=dt.UTC)
        current.save(update_fields=["state", "decided_by", "decided_at"])
    return current


def _allocator(reload: DefragReload, since: dt.datetime) -> dict | None:
    """The deployment's newest process sample on the card since then (None: none yet)."""
    rows = samples.allocator_now([reload.gpu_id], since)
    return next((r for r in rows if r["deployment_id"] == reload.deployment_id), None)


def advance(plan: DefragPlan, now: dt.datetime) -> None:
    """One step of an approved plan: open the window, run the next reload, record results.
    One reload at a time, so that two tenants of one card never reload together."""
    if plan.state == DefragPlan.State.APPROVED:
        if now < plan.window_start:
            return
        _set_state(
            plan, DefragPlan.State.RUNNING if now < plan.window_end else DefragPlan.State.MISSED
        )
        if plan.state != DefragPlan.State.RUNNING:
            return
    if plan.state != DefragPlan.State.RUNNING:
        return
    running = plan.reloads.filter(state=DefragReload.State.RUNNING).select_related("action").first()
    if running is not None:
        _finish(running, now)
        return
    due = plan.reloads.filter(state=DefragReload.State.SCHEDULED).order_by("order").first()
    if due is None:
        _set_state(plan, DefragPlan.State.DONE)
        return
    if now >= plan.window_end:
        plan.reloads.filter(state=DefragReload.State.SCHEDULED).update(
            state=DefragReload.State.SKIPPED
        )
        _set_state(plan, DefragPlan.State.DONE)
        return
    if now < due.not_before:
        return
    with open_change():
        before = _allocator(due, now - FRESH) or {}
        action = services.do_request_action(
            acting_user=None,
            host=plan.host,
            action="restart",
            deployment=due.deployment,
            origin=HostAction.Origin.DEFRAG,
            approved_by=plan.decided_by,
        )
        due.action, due.state = action, DefragReload.State.RUNNING
        due.pid_before = before.get("pid")
        due.fragmentation_before = before.get("fragmentation")
        due.reserve_before_bytes = before.get("reserve")
        due.save(
            update_fields=[
                "action",
                "state",
                "pid_before",
                "fragmentation_before",
                "reserve_before_bytes",
            ]
        )


def _finish(reload: DefragReload, now: dt.datetime) -> None:
    action = reload.action
    if action is None or not action.finished:
        return
    if action.state != HostAction.State.SUCCEEDED:
        state = DefragReload.State.FAILED
        fragmentation = reserve = None
    else:
        if now - action.finished_at < dt.timedelta(seconds=settings.OPERATIONS_SETTLE_S):
            return
        # The reloaded process, never the one before it: its samples may still come in.
        after = _allocator(reload, action.finished_at)
        if after is None or after["pid"] == reload.pid_before or after["fragmentation"] is None:
            return  # the reloaded process has not been sampled yet
        fragmentation, reserve = after["fragmentation"], after["reserve"]
        state = DefragReload.State.DONE
    with (
        open_change(),
        audited(reload, Action.DEFRAG_RELOAD, None, host=reload.plan.host),
    ):
        reload.state, reload.finished_at = state, now
        reload.fragmentation_after, reload.reserve_after_bytes = fragmentation, reserve
        reload.save(
            update_fields=["state", "finished_at", "fragmentation_after", "reserve_after_bytes"]
        )


def _set_state(plan: DefragPlan, state: str) -> None:
    DefragPlan.objects.filter(pk=plan.pk).update(state=state)
    plan.state = state


def due_plans(now: dt.datetime):
    return DefragPlan.objects.filter(
        Q(state=DefragPlan.State.APPROVED, window_start__lte=now)
        | Q(state=DefragPlan.State.RUNNING)
    ).select_related("host", "decided_by")
