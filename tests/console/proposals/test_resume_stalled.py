"""What a broker outage dropped is queued again by beat."""

import datetime as dt

import pytest
from django.utils import timezone

from console.core.auditing.models import AuditEntry
from console.proposals import queue, tasks
from console.proposals.models import LoadTest, Notification, Proposal
from console.proposals.transitions import State
from tests.console.proposals.support import create_proposal, running_load_test, seed_host
from tests.factories import ServedModelFactory

pytestmark = pytest.mark.django_db


def test_stalled_checks_and_unsent_notifications_are_queued_again(personas, monkeypatch):
    host = seed_host()
    proposal = create_proposal(personas["oncall"], host=host, gpus=[host.gpus.get(index=2)],
                               model=ServedModelFactory(name="late"))  # fmt: skip
    long_ago = timezone.now() - dt.timedelta(minutes=30)
    Proposal.objects.filter(pk=proposal.pk).update(state=State.SUBMITTED, updated_at=long_ago)
    fresh = create_proposal(personas["oncall"], host=host, gpus=[host.gpus.get(index=2)],
                            model=ServedModelFactory(name="fresh"))  # fmt: skip
    Proposal.objects.filter(pk=fresh.pk).update(state=State.SUBMITTED)
    note = Notification.objects.create(
        proposal=proposal,
        event="ready",
        channel=Notification.Channel.WEBHOOK,
        recipients=["http://hook"],
        subject="s",
        body="b",
    )
    Notification.objects.filter(pk=note.pk).update(created_at=long_ago)
    checks, deliveries = [], []
    monkeypatch.setattr(queue, "queue_gate_checks", lambda pk, rev: checks.append((pk, rev)))
    monkeypatch.setattr(queue, "queue_notification", deliveries.append)
    result = tasks.resume_stalled()
    assert checks == [(proposal.pk, proposal.revision)]  # not the proposal submitted just now
    assert deliveries == [note.pk]
    assert result == {
        "checks": 1,
        "notifications": 1,
        "load_tests_lost": 0,
        "load_tests_queued": 0,
    }


def test_a_test_whose_worker_was_lost_is_given_up_and_a_queued_one_sent_again(
    personas, monkeypatch, settings, client_as
):
    host = seed_host()
    author = personas["oncall"]
    tests_of = [
        running_load_test(create_proposal(author, host=host, gpus=[host.gpus.get(index=i)]), author)
        for i in (0, 1, 2)
    ]
    lost, alive, queued = tests_of
    now = timezone.now()
    past_limit = now - dt.timedelta(seconds=settings.LOADTEST_TASK_TIME_LIMIT_S + 120)
    LoadTest.objects.filter(pk=lost.pk).update(started_at=past_limit)
    LoadTest.objects.filter(pk=alive.pk).update(started_at=now - dt.timedelta(seconds=30))
    LoadTest.objects.filter(pk=queued.pk).update(
        status=LoadTest.Status.QUEUED, uploaded_at=now - dt.timedelta(minutes=30)
    )
    sent = []
    monkeypatch.setattr(queue, "queue_load_test", sent.append)
    monkeypatch.setattr(queue, "queue_gate_checks", lambda pk, rev: None)
    result = tasks.resume_stalled()
    assert (result["load_tests_lost"], result["load_tests_queued"]) == (1, 1)
    assert sent == [queued.pk]
    lost.refresh_from_db()
    assert (lost.status, lost.failure_code) == (LoadTest.Status.FAILED, "worker_lost")
    assert lost.failure_params["phase"] == "hold"
    assert LoadTest.objects.get(pk=alive.pk).status == LoadTest.Status.RUNNING
    entry = AuditEntry.objects.filter(object_id=str(lost.pk), action="load_test.finish").get()
    assert (entry.before["status"], entry.after["status"]) == ("running", "failed")
    # Again: nothing more to give up.
    assert tasks.resume_stalled()["load_tests_lost"] == 0
    page = client_as("oncall").get(lost.get_absolute_url(), HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "在 hold 阶段失联" in page.content.decode()
