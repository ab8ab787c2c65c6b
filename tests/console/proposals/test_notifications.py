"""Approvers hear of ready proposals, authors of decisions; failures retry and block nothing."""

import json
import urllib.error

import pytest
from django.core import mail

from console.proposals import services
from console.proposals.models import Notification
from console.proposals.transitions import State
from tests.console.proposals.support import checked, create_proposal, ready_proposal
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

WEBHOOK = "https://hooks.example.internal/gpu-console"


@pytest.fixture
def people(personas):
    for name, user in personas.items():
        user.email = f"{name}@example.com"
        user.save()
    UserFactory(username="second-approver", email="second@example.com", roles=["approver"])
    return personas


class Webhook:
    """urlopen stand-in: fails the first `failures` calls, records every POST."""

    def __init__(self, failures: int = 0):
        self.failures = failures
        self.posts: list[dict] = []

    def __call__(self, request, timeout):
        self.posts.append(json.loads(request.data))
        assert request.get_method() == "POST"
        assert request.headers["Content-type"] == "application/json"
        if len(self.posts) <= self.failures:
            raise urllib.error.URLError("connection refused")
        return _Answer()


class _Answer:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_ready_proposals_reach_the_approvers_but_not_the_author(
    people, settings, eager_celery, django_capture_on_commit_callbacks
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    proposal = create_proposal(people["oncall"])
    with django_capture_on_commit_callbacks(execute=True):
        checked(proposal)
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert sorted(message.to) == ["approver@example.com", "second@example.com"]
    assert message.subject == f"Ready for approval: {proposal}"
    assert f"/proposals/{proposal.pk}/" in message.body
    assert Notification.objects.get().status == Notification.Status.SENT


def test_the_author_hears_of_the_decision_with_the_comment(
    people, settings, eager_celery, django_capture_on_commit_callbacks
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    proposal = ready_proposal(people["oncall"])
    with django_capture_on_commit_callbacks(execute=True):
        services.do_reject(proposal, acting_user=people["approver"], comment="Card 0 is full.")
    assert [m.to for m in mail.outbox] == [["oncall@example.com"]]
    assert mail.outbox[0].subject == f"Rejected by approver: {proposal}"
    assert "Card 0 is full." in mail.outbox[0].body


def test_a_failing_webhook_is_retried_and_does_not_block_the_approval(
    people, settings, eager_celery, django_capture_on_commit_callbacks, monkeypatch
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.PROPOSAL_WEBHOOK_URL = WEBHOOK
    hook = Webhook(failures=2)
    monkeypatch.setattr("console.proposals.notifications.urllib.request.urlopen", hook)
    proposal = ready_proposal(people["oncall"])
    with django_capture_on_commit_callbacks(execute=True):
        approved = services.do_approve_proposal(proposal, acting_user=people["approver"])
    assert approved.state == State.APPROVED
    webhook = Notification.objects.get(channel=Notification.Channel.WEBHOOK, event="approved")
    assert webhook.status == Notification.Status.SENT
    assert webhook.attempts == 3
    assert webhook.last_error == "URLError: <urlopen error connection refused>"
    assert len(hook.posts) == 3
    assert hook.posts[0]["event"] == "approved"
    assert hook.posts[0]["proposal"]["id"] == proposal.pk
    assert hook.posts[0]["decided_by"] == "approver"
    email = Notification.objects.get(channel=Notification.Channel.EMAIL, event="approved")
    assert (email.status, email.recipients) == ("sent", ["oncall@example.com"])


def test_a_webhook_that_never_answers_is_given_up_on_and_the_decision_stands(
    people, settings, eager_celery, django_capture_on_commit_callbacks, monkeypatch
):
    settings.PROPOSAL_WEBHOOK_URL = WEBHOOK
    settings.PROPOSAL_NOTIFY_RETRIES = 2
    hook = Webhook(failures=100)
    monkeypatch.setattr("console.proposals.notifications.urllib.request.urlopen", hook)
    proposal = ready_proposal(people["oncall"])
    with django_capture_on_commit_callbacks(execute=True):
        services.do_request_changes(proposal, acting_user=people["approver"], comment="Retest.")
    webhook = Notification.objects.get(
        channel=Notification.Channel.WEBHOOK, event="changes_requested"
    )
    assert webhook.status == Notification.Status.FAILED
    assert webhook.attempts == 3  # the first try and two retries
    proposal.refresh_from_db()
    assert proposal.state == State.CHANGES_REQUESTED


def test_a_broker_that_is_down_leaves_the_notification_pending(
    people, django_capture_on_commit_callbacks, monkeypatch
):
    def refuse(*args, **kwargs):
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr("celery.canvas.Signature.apply_async", refuse)
    proposal = ready_proposal(people["oncall"])
    with django_capture_on_commit_callbacks(execute=True):
        approved = services.do_approve_proposal(proposal, acting_user=people["approver"])
    assert approved.state == State.APPROVED
    assert Notification.objects.get(event="approved").status == Notification.Status.PENDING
