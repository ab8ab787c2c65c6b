"""Alert tasks: the evaluation beat runs, and one delivery per notification.

Delivery is a task of its own, retried with growing waits, so a mail server, webhook or
Alertmanager that is down never slows or blocks evaluation. Both take primary keys (or
nothing) and are safe to run twice: a cycle run again decides nothing new, and a notification
already sent is not sent again.
"""

import datetime as dt
import logging
import smtplib

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.alerts.delivery import deliver
from console.alerts.evaluator import DELIVER, evaluate
from console.alerts.models import Notification

log = logging.getLogger(__name__)

EVALUATE = "alerts.evaluate"
RETRY_BASE_S = 5
RETRY_MAX_S = 600
_DELIVERY_ERRORS = (OSError, smtplib.SMTPException)


# Longer than a delivery normally waits in the queue: what is older was lost on its way
# (a broker outage after the commit). Sending it again is safe: a copy finds it sent.
STALLED_AFTER = dt.timedelta(minutes=5)


@shared_task(name=EVALUATE, time_limit=120, soft_time_limit=110, ignore_result=True)
def evaluate_alerts() -> dict:
    result = evaluate()
    if result is None:
        return {"skipped": "another evaluator is running"}
    stalled = Notification.objects.filter(
        status=Notification.Status.PENDING,
        attempts=0,
        created_at__lt=timezone.now() - STALLED_AFTER,
    ).values_list("pk", flat=True)[:500]
    for notification_id in stalled:
        deliver_notification.delay(notification_id)
    return {"fired": len(result.fired), "resolved": len(result.resolved),
            "notifications": len(result.notifications)}  # fmt: skip


@shared_task(bind=True, name=DELIVER, time_limit=60, soft_time_limit=50, ignore_result=True)
def deliver_notification(self, notification_id: int) -> str:
    # The row stays locked while it is sent: a second copy of this task skips it, and finds
    # it sent once the first commits.
    with transaction.atomic():
        note = (
            Notification.objects.select_for_update(skip_locked=True)
            .filter(pk=notification_id, status=Notification.Status.PENDING)
            .first()
        )
        if note is None:
            return "nothing to do"
        note.attempts += 1
        try:
            deliver(note)
        except _DELIVERY_ERRORS as error:
            failure = error
            note.last_error = f"{type(error).__name__}: {error}"[:1000]
            gives_up = self.request.retries >= settings.ALERT_DELIVERY_RETRIES
            if gives_up:
                note.status = Notification.Status.FAILED
            note.save(update_fields=["status", "attempts", "last_error"])
        else:
            note.status, note.sent_at = Notification.Status.SENT, timezone.now()
            note.save(update_fields=["status", "attempts", "sent_at"])
            return "sent"
    if gives_up:
        log.warning("alert notification %s failed for good: %s", notification_id, failure)
        return "failed"
    countdown = min(RETRY_MAX_S, RETRY_BASE_S * 2**self.request.retries)
    raise self.retry(exc=failure, countdown=countdown, max_retries=None)
