"""Queueing the workflow's tasks, by name (a signature runs eagerly where the app is eager).

Services and notifications queue work here rather than through the task objects, so the
import graph runs one way: tasks call services, services never import tasks. A broker that is
down loses nothing: the proposal or notification stays as it was, and `resume_stalled` (beat)
queues it again.
"""

import logging

from celery import current_app

log = logging.getLogger(__name__)

RUN_GATES = "proposals.run_gates"
DELIVER_NOTIFICATION = "proposals.deliver_notification"
RUN_LOAD_TEST = "proposals.run_load_test"


def queue_gate_checks(proposal_id: int, revision: int, at: str | None = None) -> None:
    args = (proposal_id, revision) if at is None else (proposal_id, revision, at)
    try:
        current_app.signature(RUN_GATES, args=args).delay()
    except Exception:  # the author's next edit or submit, or resume_stalled, queues them again
        log.exception("could not queue the gate checks of proposal %s", proposal_id)


def queue_notification(notification_id: int) -> None:
    try:
        current_app.signature(DELIVER_NOTIFICATION, args=(notification_id,)).delay()
    except Exception:  # the row stays pending; resume_stalled queues it again
        log.exception("could not queue notification %s", notification_id)


def queue_load_test(load_test_id: int) -> None:
    try:
        current_app.signature(RUN_LOAD_TEST, args=(load_test_id,)).delay()
    except Exception:  # the test stays queued; starting it again queues it again
        log.exception("could not queue load test %s", load_test_id)
