"""MPS server down: with a standing policy, restart it (backoff, a cap per hour) and watch
each client come back, by its new PID on the card."""

from __future__ import annotations

import datetime as dt

from django.conf import settings

from console.core.auditing import Action
from console.core.auditing.changes import audited, open_change, record_created
from console.operations import services
from console.operations.decisions import mps as decisions
from console.operations.models import HostAction, MpsRecovery, StandingPolicy
from inventory.models import Deployment, Event
from inventory.timeseries import operations as samples


def _restart_policy() -> decisions.RestartPolicy:
    return decisions.RestartPolicy(max_per_hour=settings.MPS_RESTARTS_PER_HOUR)


def on_mps_server_down(event_pk: int) -> MpsRecovery | None:
    """Start the recovery of one crash (idempotent: an event is recovered once)."""
    event = Event.objects.select_related("host", "gpu").filter(pk=event_pk).first()
    if event is None or event.gpu is None or event.kind != Event.Kind.MPS_SERVER_DOWN:
        return None
    if MpsRecovery.objects.filter(event=event).exists():
        return None
    known = {str(d.pk): d for d in Deployment.objects.filter(host=event.host)}
    clients = {}
    for client in (event.detail or {}).get("clients", []):
        deployment = known.get(str(client.get("deployment_id")))
        if deployment is not None:
            clients[deployment.runtime_name or str(deployment.pk)] = {
                "deployment_id": deployment.pk,
                "pid": client.get("pid"),
                "returned_pid": None,
                "returned_at": None,
            }
    standing = services.active_policy(event.host, StandingPolicy.Kind.MPS_RESTART)
    crashed = event.at.timestamp()
    with open_change():
        recovery = MpsRecovery.objects.create(
            host=event.host,
            gpu=event.gpu,
            event=event,
            crashed_at=event.at,
            clients=clients,
            state=MpsRecovery.State.RESTARTING if standing else MpsRecovery.State.NO_POLICY,
            next_attempt_at=_at(decisions.next_attempt(crashed, 0, [], crashed, _restart_policy()))
            if standing
            else None,
        )
        record_created(recovery, Action.MPS_RECOVERY_START, None, host=event.host)
    return recovery


def _at(epoch: float | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC) if epoch is not None else None


def _restarts_last_hour(recovery: MpsRecovery, now: dt.datetime) -> list[float]:
    sent = HostAction.objects.filter(
        host=recovery.host,
        action="mps_restart",
        params__card_index=recovery.gpu.index,
        sent_at__gt=now - dt.timedelta(hours=1),
    ).values_list("sent_at", flat=True)
    return [moment.timestamp() for moment in sent]


def advance(recovery: MpsRecovery, now: dt.datetime) -> None:
    """One step of a recovery: restart when due, then look for the clients."""
    if recovery.state == MpsRecovery.State.RESTARTING:
        if recovery.next_attempt_at and recovery.next_attempt_at > now:
            return
        standing = services.active_policy(recovery.host, StandingPolicy.Kind.MPS_RESTART)
        due = decisions.next_attempt(
            recovery.crashed_at.timestamp(),
            recovery.attempts,
            _restarts_last_hour(recovery, now),
            now.timestamp(),
            _restart_policy(),
        )
        with open_change():
            if standing is None or due is None:
                settled = (
                    MpsRecovery.State.NO_POLICY if standing is None else MpsRecovery.State.CAPPED
                )
                with _settling(recovery):
                    recovery.state = settled
                    recovery.save(update_fields=["state"])
                return
            if due > now.timestamp():
                recovery.next_attempt_at = _at(due)
                recovery.save(update_fields=["next_attempt_at"])
                return
            action = services.do_request_action(
                acting_user=None,
                host=recovery.host,
                action="mps_restart",
                params={"card_index": recovery.gpu.index},
                origin=HostAction.Origin.MPS,
                policy=standing,
            )
            recovery.actions.add(action)
            recovery.attempts += 1
            recovery.state = MpsRecovery.State.AWAITING_CLIENTS
            recovery.save(update_fields=["attempts", "state"])
        return
    if recovery.state == MpsRecovery.State.AWAITING_CLIENTS:
        _look_for_clients(recovery, now)


def _look_for_clients(recovery: MpsRecovery, now: dt.datetime) -> None:
    action = recovery.actions.order_by("-created_at").first()
    if action is None or not action.finished:
        return
    with open_change():
        if action.state != HostAction.State.SUCCEEDED:
            recovery.state = MpsRecovery.State.RESTARTING
            recovery.next_attempt_at = None
            recovery.save(update_fields=["state", "next_attempt_at"])
            return
        by_deployment = samples.process_pids_since(recovery.gpu_id, action.finished_at)
        clients = dict(recovery.clients)
        names = {v["deployment_id"]: k for k, v in clients.items()}
        pids_now = {names[d]: pids for d, pids in by_deployment.items() if d in names}
        old = {name: client["pid"] for name, client in clients.items()}
        for name, pid in decisions.clients_returned(list(clients), pids_now, old).items():
            if clients[name]["returned_pid"] is None:
                clients[name] = {
                    **clients[name],
                    "returned_pid": pid,
                    "returned_at": now.isoformat(),
                }
        if all(c["returned_pid"] is not None for c in clients.values()):
            with _settling(recovery):
                recovery.clients = clients
                recovery.state, recovery.recovered_at = MpsRecovery.State.RECOVERED, now
                recovery.save(update_fields=["clients", "state", "recovered_at"])
            return
        recovery.clients = clients
        if now - action.finished_at > dt.timedelta(seconds=settings.MPS_CLIENT_RETURN_S):
            recovery.state, recovery.next_attempt_at = MpsRecovery.State.RESTARTING, None
            recovery.save(update_fields=["clients", "state", "next_attempt_at"])
        else:
            recovery.save(update_fields=["clients"])


def _settling(recovery: MpsRecovery):
    """The audit of the step that ends a recovery (recovered, capped, or no policy)."""
    return audited(recovery, Action.MPS_RECOVERY_SETTLE, None, host=recovery.host)
