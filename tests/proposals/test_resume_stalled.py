"""What a broker outage dropped is queued again by beat."""

import datetime as dt

import pytest
from django.utils import timezone

from console.proposals import queue, tasks
from console.proposals.models import Notification, Proposal
from console.proposals.transitions import State
from tests.factories import ServedModelFactory
from tests.proposals.support import create_proposal, seed_host

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
    assert result == {"checks": 1, "notifications": 1}
