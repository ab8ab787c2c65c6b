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

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts import payloads
from alerts.conditions import in_scope, silenced_by
from alerts.evaluation import OpenAlert, State, Timing, repeat_due, step
from alerts.facts import events_within, read_facts
from alerts.models import Alert, AlertRule, Notification, Silence
from alerts.signals import alert_fired, alert_resolved
from inventory.timeseries.locks import ProcessLock

LOCK_NAME = "alerts evaluation"


@dataclass
class CycleResult:
    fired: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    pending: int = 0
    notifications: list[int] = field(default_factory=list)


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
    for alert in Alert.objects.open().select_related("rule").select_for_update(of=("self",)):
        open_rows[alert.rule_id][alert.fingerprint] = alert
    result = CycleResult()
    created, changed, fired, resolved_now = [], [], [], []
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
        for crossing in decisions.fire + decisions.still:
            row = rows[crossing.fingerprint]
            if crossing in decisions.fire:
                row.state, row.firing_at = Alert.State.FIRING, now
                fired.append(row)
            row.values, row.last_crossed_at = dict(crossing.values), now
            changed.append(row)
        for fingerprint in decisions.resolve:
            resolved_now.append(_resolve(rows[fingerprint], now))
        if decisions.drop:
            Alert.objects.filter(pk__in=[rows[fp].pk for fp in decisions.drop]).delete()
    # Alerts of rules disabled or deleted since they opened end with them.
    for rows in open_rows.values():
        for row in rows.values():
            if row.state == Alert.State.FIRING:
                resolved_now.append(_resolve(row, now))
            else:
                row.delete()
    Alert.objects.bulk_create(created)
    firing_now = [a for a in created if a.state == Alert.State.FIRING] + fired
    result.fired = [a.pk for a in firing_now]
    result.resolved = [a.pk for a in resolved_now]
    result.pending = sum(1 for a in created if a.state == Alert.State.PENDING)
    Alert.objects.bulk_update(
        changed + resolved_now, ["state", "firing_at", "values", "last_crossed_at", "ended_at"]
    )
    notes = _plan_notifications(now, resolved_now)
    result.notifications = [n.pk for n in notes]
    transaction.on_commit(lambda: _after_commit(result))
    return result


def _resolve(row: Alert, now: dt.datetime) -> Alert:
    row.state, row.ended_at = Alert.State.RESOLVED, now
    return row


def _plan_notifications(now: dt.datetime, resolved_now: list[Alert]) -> list[Notification]:
    silences = [s.matchers for s in Silence.objects.active(now)]
    firing = list(Alert.objects.firing().select_related("rule").order_by("pk"))
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
    touched = {a.pk: a for items in human.values() for a, _ in items}
    touched.update({a.pk: a for alerts in machine.values() for a in alerts})
    Alert.objects.bulk_update(
        list(touched.values()),
        ["last_notified_at", "notifications_sent", "resolved_notified", "alertmanager_posted_at"],
    )
    return notes


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
    from alerts.tasks import deliver_notification

    for note_id in result.notifications:
        deliver_notification.delay(note_id)
    for alert in Alert.objects.filter(pk__in=result.fired).select_related("rule", "gpu", "host"):
        alert_fired.send(sender=AlertRule, alert=alert)
    for alert in Alert.objects.filter(pk__in=result.resolved).select_related("rule"):
        alert_resolved.send(sender=AlertRule, alert=alert)
