"""Every change people make to alerts goes through here: one change id, one audit row each."""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import ValidationError
from django.utils import timezone

from console.alerts.models import Alert, AlertRule, Silence
from console.core.auditing import Action, changed_fields, snapshot
from console.core.auditing.changes import atomic_change, audited, record_created


class AlertActionRefused(Exception):
    """The action does not apply to the alert or silence as it is now; `code` says why."""

    def __init__(self, code: str, message: str):
        self.code = code
        super().__init__(message)


MAX_SILENCE = dt.timedelta(days=30)
# The labels a silence may match on: what alerts carry.
MATCHABLE_LABELS = ("alertname", "severity", "Hostname", "gpu", "UUID", "modelName",
                    "deployment", "model", "xid_class", "event")  # fmt: skip


@atomic_change
def do_acknowledge_alert(alert: Alert, *, acting_user, comment: str) -> Alert:
    current = Alert.objects.select_for_update(of=("self",)).select_related("host").get(pk=alert.pk)
    if current.state != Alert.State.FIRING:
        raise AlertActionRefused("not_firing", "only a firing alert can be acknowledged")
    if current.acknowledged_at is not None:
        raise AlertActionRefused("already_acknowledged", "already acknowledged")
    with audited(current, Action.ALERT_ACKNOWLEDGE, acting_user, host=current.host,
                 comment=comment):  # fmt: skip
        current.acknowledged_by = acting_user
        current.acknowledged_at = timezone.now()
        current.acknowledge_comment = comment
        current.save(update_fields=["acknowledged_by", "acknowledged_at", "acknowledge_comment"])
    return current


def clean_matchers(matchers: dict) -> dict[str, str]:
    if not isinstance(matchers, dict) or not matchers:
        raise ValidationError({"matchers": "Name at least one label to match."})
    unknown = sorted(set(matchers) - set(MATCHABLE_LABELS))
    if unknown:
        raise ValidationError({"matchers": f"Not a label alerts carry: {', '.join(unknown)}."})
    cleaned = {str(key): str(value).strip() for key, value in matchers.items()}
    if not all(cleaned.values()):
        raise ValidationError({"matchers": "Every matcher needs a value."})
    return cleaned


@atomic_change
def do_silence(*, acting_user, matchers: dict, duration: dt.timedelta, comment: str) -> Silence:
    if duration <= dt.timedelta(0) or duration > MAX_SILENCE:
        raise ValidationError({"duration": "A silence lasts from a minute to 30 days."})
    if not comment.strip():
        raise ValidationError({"comment": "Say why (a maintenance window, a ticket)."})
    now = timezone.now()
    silence = Silence.objects.create(
        matchers=clean_matchers(matchers),
        comment=comment,
        created_by=acting_user,
        starts_at=now,
        ends_at=now + duration,
    )
    record_created(silence, Action.ALERT_SILENCE, acting_user, comment=comment)
    return silence


@atomic_change
def do_unsilence(silence: Silence, *, acting_user) -> Silence:
    current = Silence.objects.select_for_update().get(pk=silence.pk)
    now = timezone.now()
    if current.ends_at <= now:
        raise AlertActionRefused("silence_over", "this silence has already ended")
    with audited(current, Action.ALERT_UNSILENCE, acting_user):
        current.ends_at = now
        current.ended_early_by = acting_user
        current.save(update_fields=["ends_at", "ended_early_by"])
    return current


RULE_EDITABLE = (
    *("name", "severity", "enabled", "scope", "scope_label", "host", "deployment"),
    *("for_s", "resolve_after_s", "repeat_interval_s", "params", "runbook_slug"),
)


@atomic_change
def do_update_rule(rule: AlertRule, *, acting_user, comment: str = "", **changes) -> AlertRule:
    unknown = set(changes) - set(RULE_EDITABLE)
    if unknown:
        raise TypeError(f"not editable: {', '.join(sorted(unknown))}")
    current = AlertRule.objects.select_for_update().get(pk=rule.pk)
    # An edit that changes nothing is no new version, and so no row.
    with audited(current, Action.ALERT_RULE_UPDATE, acting_user, comment=comment,
                 only_if_changed=True) as row:  # fmt: skip
        for field, value in changes.items():
            setattr(current, field, value)
        if changed_fields(row.before, snapshot(current)):
            current.version += 1
            current.full_clean()
            current.save()
            row.host = current.host  # the host as edited: the edit may scope it to another
    return current
