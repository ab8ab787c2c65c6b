"""Alerting's hook into degradation: a card memory alert, or an OOM alert, that starts firing
queues the degradation decision for its card at once. The watch's poll
(OPERATIONS_WATCH_INTERVAL_S) stays the safety net for an alert rule disabled, silenced or
scoped away, and for a worker that lost the queued task."""

from __future__ import annotations

from django.dispatch import receiver

from console.alerts.models import AlertRule
from console.alerts.signals import alert_fired
from console.operations.tasks import on_card_over_limit
from console.operations.watch import EVENT_HORIZON
from inventory.models import Event


def degradation_trigger(alert) -> tuple[int, int | None] | None:
    """(card, OOM event or None) for an alert that says a card ran out of memory, else None."""
    if alert.gpu_id is None:
        return None
    rule = alert.rule
    if rule.kind == AlertRule.Kind.CARD_MEMORY:
        return alert.gpu_id, None
    if rule.kind == AlertRule.Kind.EVENT and rule.params.get("event_kind") == Event.Kind.OOM:
        # The run is tied to the OOM it answers, as the watch ties it, so neither starts another.
        oom = (
            Event.objects.filter(
                gpu_id=alert.gpu_id,
                kind=Event.Kind.OOM,
                at__gt=alert.last_crossed_at - EVENT_HORIZON,
            )
            .order_by("-at")
            .values_list("pk", flat=True)
            .first()
        )
        return alert.gpu_id, oom
    return None


@receiver(alert_fired, dispatch_uid="operations.degrade_on_alert")
def degrade_on_alert(sender, alert, **kwargs) -> None:
    trigger = degradation_trigger(alert)
    if trigger is None:
        return

    card_pk, event_pk = trigger
    on_card_over_limit.delay(card_pk, event_pk)
