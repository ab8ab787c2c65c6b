"""Celery tasks of the proposal workflow: run the gates, deliver notifications.

They take primary keys, are idempotent (a stale or repeated message does nothing), and have
time limits.
"""

import datetime as dt
import logging
import smtplib

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from console.core.auditing.changes import open_change
from console.proposals import notifications, progress, queue
from console.proposals.gate_checks import check
from console.proposals.loadtest import services as loadtest_services
from console.proposals.models import LoadTest, Notification, Proposal
from console.proposals.services import do_record_gate_results, do_start_checks
from console.proposals.transitions import State

log = logging.getLogger(__name__)

# Retries wait 30 s, 60 s, 120 s, ... (capped), so a short outage costs one or two attempts.
RETRY_BASE_S = 30
RETRY_MAX_S = 1800


@shared_task(name=queue.RUN_GATES, time_limit=120, soft_time_limit=110, ignore_result=True)
def run_gates(proposal_id: int, revision: int, at: str | None = None) -> str:
    """`at` (ISO 8601): the demo's history replays a submission then; checked as of then."""

    moment = dt.datetime.fromisoformat(at) if at else None
    with open_change(at=moment):
        proposal = do_start_checks(proposal_id, revision)
    if proposal is None:
        return "stale"
    proposal = Proposal.objects.select_related("served_model", "host", "mig_slice__gpu").get(
        pk=proposal_id
    )
    progress.started(proposal_id, revision)
    checked = check(
        proposal,
        now=moment,
        on_outcome=lambda outcome: progress.finished(proposal_id, revision, outcome),
    )
    with open_change(at=moment):
        recorded = do_record_gate_results(proposal_id, revision, checked)
    return recorded.state if recorded else "stale"


_DELIVERY_ERRORS = (OSError, smtplib.SMTPException)


@shared_task(
    bind=True,
    name=queue.DELIVER_NOTIFICATION,
    time_limit=60,
    soft_time_limit=50,
    ignore_result=True,
)
def deliver_notification(self, notification_id: int) -> str:
    notification = Notification.objects.filter(pk=notification_id).first()
    if notification is None or notification.status != Notification.Status.PENDING:
        return "nothing to do"
    notification.attempts += 1
    try:
        notifications.deliver(notification)
    except _DELIVERY_ERRORS as error:
        notification.last_error = f"{type(error).__name__}: {error}"[:1000]
        if self.request.retries >= settings.PROPOSAL_NOTIFY_RETRIES:
            notification.status = Notification.Status.FAILED
            notification.save(update_fields=["status", "attempts", "last_error"])
            log.warning("notification %s failed for good: %s", notification_id, error)
            return "failed"
        notification.save(update_fields=["attempts", "last_error"])
        countdown = min(RETRY_MAX_S, RETRY_BASE_S * 2**self.request.retries)
        raise self.retry(exc=error, countdown=countdown, max_retries=None) from None
    notifications.mark_sent(notification)
    return "sent"


# Longer than a normal check or delivery takes: what is older was lost on its way.
STALLED_AFTER = dt.timedelta(minutes=5)


@shared_task(name="proposals.resume_stalled", time_limit=60, soft_time_limit=50, ignore_result=True)
def resume_stalled() -> dict:
    """Queue again what a broker outage dropped: checks of proposals left submitted (or
    checking, after a lost worker), notifications never attempted and load tests still
    queued; give up load tests whose worker was lost. Idempotent: a check of an old revision,
    a notification already sent and a test already taken up do nothing."""
    cutoff = timezone.now() - STALLED_AFTER
    stalled = Proposal.objects.filter(
        state__in=[State.SUBMITTED, State.CHECKING], updated_at__lt=cutoff
    )
    for proposal_id, revision in stalled.values_list("pk", "revision"):
        queue.queue_gate_checks(proposal_id, revision)
    pending = Notification.objects.filter(
        status=Notification.Status.PENDING, attempts=0, created_at__lt=cutoff
    ).values_list("pk", flat=True)
    for notification_id in pending:
        queue.queue_notification(notification_id)
    lost = loadtest_services.lost_tests(timezone.now())
    for load_test_id in lost:
        loadtest_services.do_give_up_lost_test(load_test_id)
    queued = LoadTest.objects.filter(status=LoadTest.Status.QUEUED, uploaded_at__lt=cutoff)
    queued_ids = list(queued.values_list("pk", flat=True))
    for load_test_id in queued_ids:  # begin() takes a queued test once, however often sent
        queue.queue_load_test(load_test_id)
    return {
        "checks": stalled.count(),
        "notifications": len(pending),
        "load_tests_lost": len(lost),
        "load_tests_queued": len(queued_ids),
    }


from console.proposals.loadtest import tasks as loadtest_tasks  # noqa: E402, F401  (registers its task)
