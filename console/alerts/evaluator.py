"""One evaluation cycle: read the facts, step every rule's alerts, decide the notifications.

One evaluator at a time (a PostgreSQL advisory lock: a second worker's cycle returns at once),
and the whole cycle is one transaction: the states it writes and the notifications it decides
commit together, and delivery starts only after the commit. A cycle run again on the same data
(a redelivered task) finds its decisions already written and decides nothing new.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import defaultdict
from dataclasses import dataclass, field

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import DurationField, ExpressionWrapper, F, Q
from django.utils import timezone

from console.alerts import payloads
from console.alerts.conditions import in_scope, silenced_by
from console.alerts.evaluation import OpenAlert, State, Timing, repeat_due, step
from console.alerts.facts import events_within, read_facts
from console.alerts.models import Alert, AlertRule, Notification, Silence
from console.alerts.signals import alert_fired, alert_resolved
from inventory.timeseries.locks import ProcessLock

LOCK_NAME = "alerts evaluation"


@dataclass
class CycleResult:
    fired: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    pending: int = 0
    notifications: list[int] = field(default_factory=list)


# The delivery task (console.alerts.tasks).
DELIVER = "alerts.deliver"


def evaluate(now: dt.datetime | None = None) -> CycleResult | None:
    """None when another evaluator holds the lock (its cycle covers this one)."""
    lock = ProcessLock(LOCK_NAME)
    if not lock.acquire():
        return None
    try:
        return run_cycle(now or timezone.now())
    finally:
        lock.release()


@transaction.atomic
def run_cycle(now: dt.datetime) -> CycleResult:
    rules = list(AlertRule.objects.filter(enabled=True).order_by("pk"))
    facts = read_facts(rules, now)
    open_rows: dict[int, dict[str, Alert]] = defaultdict(dict)
    # Only what stepping needs: a cycle reads every open alert.
    opened_now = Alert.objects.open().only(
        "rule_id", "fingerprint", "state", "started_at", "last_crossed_at"
    )
    for alert in opened_now.select_for_update():
        open_rows[alert.rule_id][alert.fingerprint] = alert
    result = CycleResult()
    created, still, fired, resolved_now, dropped = [], [], [], [], []
    for rule in rules:
        rows = open_rows.pop(rule.pk, {})
        seen = events_within(facts, rule, now) if rule.kind == AlertRule.Kind.EVENT else facts
        scope = rule.scope_spec()
        crossings = {
            c.fingerprint: c for c in rule.condition()(rule.params, seen) if in_scope(scope, c)
        }
        opened = {
            fp: OpenAlert(fp, State(row.state), row.started_at, row.last_crossed_at)
            for fp, row in rows.items()
        }
        decisions = step(Timing(rule.for_s, rule.resolve_after_s), opened, crossings, now)
        for crossing in decisions.start_pending + decisions.start_firing:
            firing = crossing in decisions.start_firing
            created.append(
                Alert(
                    rule=rule,
                    fingerprint=crossing.fingerprint,
                    state=Alert.State.FIRING if firing else Alert.State.PENDING,
                    severity=rule.severity,
                    labels=dict(crossing.labels),
                    values=dict(crossing.values),
                    host_id=crossing.host_id,
                    gpu_id=crossing.gpu_id,
                    deployment_id=crossing.deployment_id,
                    started_at=now,
                    firing_at=now if firing else None,
                    last_crossed_at=now,
                )
            )
        for crossing in decisions.fire:
            row = rows[crossing.fingerprint]
            row.state, row.firing_at, row.last_crossed_at = Alert.State.FIRING, now, now
            fired.append(row)
        for crossing in decisions.still:
            still.append(rows[crossing.fingerprint])
        resolved_now += [rows[fingerprint] for fingerprint in decisions.resolve]
        dropped += [rows[fingerprint] for fingerprint in decisions.drop]
    # Alerts of rules disabled or deleted since they opened end with them.
    for rows in open_rows.values():
        for row in rows.values():
            (resolved_now if row.state == Alert.State.FIRING else dropped).append(row)
    for row in resolved_now:
        row.state, row.ended_at = Alert.State.RESOLVED, now
    # A handful of statements however many alerts move: one per kind of change, none per row.
    Alert.objects.bulk_create(created)
    Alert.objects.filter(pk__in=[a.pk for a in dropped]).delete()
    Alert.objects.filter(pk__in=[a.pk for a in fired]).update(
        state=Alert.State.FIRING, firing_at=now, last_crossed_at=now
    )
    Alert.objects.filter(pk__in=[a.pk for a in still]).update(last_crossed_at=now)
    Alert.objects.filter(pk__in=[a.pk for a in resolved_now]).update(
        state=Alert.State.RESOLVED, ended_at=now
    )
    result.fired = [a.pk for a in created if a.state == Alert.State.FIRING] + [a.pk for a in fired]
    result.resolved = [a.pk for a in resolved_now]
    result.pending = sum(1 for a in created if a.state == Alert.State.PENDING)
    notes = _plan_notifications(now, result.resolved)
    result.notifications = [n.pk for n in notes]
    transaction.on_commit(lambda: _after_commit(result))
    return result


def _due(now: dt.datetime):
    """Firing alerts that may be owed a message: never told, a repeat possibly due, or an
    Alertmanager re-post possibly due. `repeat_due` decides; this only spares the cycle the
    thousands that are told and quiet."""
    second = dt.timedelta(seconds=1)
    repeat = ExpressionWrapper(F("rule__repeat_interval_s") * second, output_field=DurationField())
    due = Q(last_notified_at__isnull=True) | Q(
        acknowledged_at__isnull=True,
        rule__repeat_interval_s__gt=0,
        last_notified_at__lte=now - repeat,
    )
    if settings.ALERT_ALERTMANAGER_URL:
        resend = dt.timedelta(seconds=settings.ALERT_ALERTMANAGER_RESEND_S)
        due |= Q(alertmanager_posted_at__isnull=True) | Q(alertmanager_posted_at__lte=now - resend)
    return Alert.objects.firing().filter(due)


def _plan_notifications(now: dt.datetime, resolved_ids: list[int]) -> list[Notification]:
    silences = [s.matchers for s in Silence.objects.active(now)]
    firing = list(_due(now).select_related("rule").order_by("pk"))
    resolved_now = list(Alert.objects.filter(pk__in=resolved_ids).select_related("rule"))
    human: dict[str, list[tuple[Alert, str]]] = defaultdict(list)
    machine: dict[str, list[Alert]] = defaultdict(list)
    resend = settings.ALERT_ALERTMANAGER_RESEND_S
    for alert in firing:
        if any(silenced_by(m, payloads.alert_labels(alert)) for m in silences):
            continue
        group = alert.labels.get("Hostname", "fleet")
        if alert.last_notified_at is None:
            human[group].append((alert, "firing"))
        elif alert.acknowledged_at is None and repeat_due(
            alert.last_notified_at, alert.rule.repeat_interval_s, now
        ):
            human[group].append((alert, "repeat"))
        if repeat_due(alert.alertmanager_posted_at, resend, now):
            machine[group].append(alert)
    for alert in resolved_now:
        group = alert.labels.get("Hostname", "fleet")
        if alert.last_notified_at is not None and not any(
            silenced_by(m, payloads.alert_labels(alert)) for m in silences
        ):
            human[group].append((alert, "resolved"))
        if alert.alertmanager_posted_at is not None:
            machine[group].append(alert)
    planned: list[tuple[Notification, list[Alert]]] = []
    for group, items in sorted(human.items()):
        for alert, kind in items:
            alert.last_notified_at = now
            alert.notifications_sent += 1
            alert.resolved_notified = alert.resolved_notified or kind == "resolved"
        alerts = [alert for alert, _ in items]
        key = _key(group, [(a.pk, kind, a.notifications_sent) for a, kind in items])
        if settings.ALERT_EMAIL_TO:
            body = payloads.email_message(group, items)
            planned.append((_note("email", group, key, body), alerts))
        if settings.ALERT_WEBHOOK_URL:
            body = payloads.webhook_body(group, items)
            planned.append((_note("webhook", group, key, body), alerts))
    if settings.ALERT_ALERTMANAGER_URL:
        for group, alerts in sorted(machine.items()):
            for alert in alerts:
                alert.alertmanager_posted_at = now
            key = _key(group, [(a.pk, a.state, now.isoformat()) for a in alerts])
            body = payloads.alertmanager_alerts(alerts, now)
            planned.append((_note("alertmanager", group, key, body), alerts))
    notes = _save_notifications(planned)
    _mark_notified(now, human, machine)
    return notes


def _mark_notified(now, human: dict, machine: dict) -> None:
    told = [alert.pk for items in human.values() for alert, _ in items]
    Alert.objects.filter(pk__in=told).update(
        last_notified_at=now, notifications_sent=F("notifications_sent") + 1
    )
    resolved = [alert.pk for items in human.values() for alert, kind in items if kind == "resolved"]
    Alert.objects.filter(pk__in=resolved).update(resolved_notified=True)
    if settings.ALERT_ALERTMANAGER_URL:
        posted = [alert.pk for alerts in machine.values() for alert in alerts]
        Alert.objects.filter(pk__in=posted).update(alertmanager_posted_at=now)


def _key(group: str, items: list[tuple]) -> str:
    return f"{group}:" + hashlib.sha256(repr(sorted(items)).encode()).hexdigest()[:40]


def _note(channel: str, group: str, key: str, payload) -> Notification:
    return Notification(
        key=f"{channel}:{key}"[:200], channel=channel, group=group[:100], payload=payload
    )


def _save_notifications(planned: list[tuple[Notification, list[Alert]]]) -> list[Notification]:
    """Three queries however many. A key already written (the cycle ran before on the same
    decisions) is left as it was: it is never sent twice."""
    if not planned:
        return []
    written = set(
        Notification.objects.filter(key__in=[n.key for n, _ in planned]).values_list(
            "key", flat=True
        )
    )
    fresh = [(note, alerts) for note, alerts in planned if note.key not in written]
    Notification.objects.bulk_create([note for note, _ in fresh])
    Notification.alerts.through.objects.bulk_create(
        [
            Notification.alerts.through(notification_id=note.pk, alert_id=alert.pk)
            for note, alerts in fresh
            for alert in alerts
        ]
    )
    return [note for note, _ in fresh]


def _after_commit(result: CycleResult) -> None:

    # By name: the task's module runs this evaluator.
    for note_id in result.notifications:
        current_app.send_task(DELIVER, args=[note_id])
    for alert in Alert.objects.filter(pk__in=result.fired).select_related("rule", "gpu", "host"):
        alert_fired.send(sender=AlertRule, alert=alert)
    for alert in Alert.objects.filter(pk__in=result.resolved).select_related("rule"):
        alert_resolved.send(sender=AlertRule, alert=alert)
