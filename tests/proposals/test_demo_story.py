"""The demo's story through the workflow: the 8-card host's switch as three proposals, and two
proposals waiting for the approver once the history is in."""

import datetime as dt
import time

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from console.models import AuditEntry
from console.proposals.models import Decision, Proposal
from console.proposals.transitions import State
from inventory.demo import ensure_demo_fleet, ensure_demo_users
from inventory.demo_history import backfill

pytestmark = pytest.mark.django_db

DAYS = 2


def _seed():
    ensure_demo_users(settings.DEMO_PASSWORD)
    ensure_demo_fleet()
    now = time.time()
    backfill(days=DAYS, now=now, only={"infer-01"})
    return dt.datetime.fromtimestamp(now - DAYS * 86400 / 2, tz=dt.UTC)


def test_the_switch_is_three_proposals_through_the_workflow_dated_then(client):
    switch = _seed()
    proposals = list(Proposal.objects.filter(host__name="infer-01", action="add").order_by("pk"))
    assert [p.served_model.name for p in proposals] == ["chat-large", "code-medium", "embed-small"]
    for proposal in proposals:
        assert proposal.state == State.VERIFIED
        assert proposal.author.username == "oncall"
        approval = proposal.decisions.get(kind=Decision.Kind.APPROVE, voided_at__isnull=True)
        assert approval.decided_by.username == "approver" != proposal.author.username
        # Every gate passed for the revision approved, its load test the rehearsal attached.
        results = proposal.gate_results.filter(revision=proposal.revision)
        assert results.count() == 5 and all(r.passed for r in results)
        assert proposal.load_tests.get().files == [
            "rehearsal-chat-large.json",
            "rehearsal-code-medium.json",
            "rehearsal-embed-small.json",
        ]
        assert proposal.deployment.isolation_mode == "gpu_group"
        assert proposal.replaces.exists()
        assert all(d.status == "stopped" for d in proposal.replaces.all())
        rows = AuditEntry.objects.filter(object_id=str(proposal.pk), content_type__model="proposal")
        actions = list(rows.order_by("at", "id").values_list("action", flat=True))
        assert actions == [
            "proposal.create",
            "proposal.load_test",
            "proposal.submit",
            "proposal.start_checks",
            "proposal.checks_passed",
            "proposal.approve",
            "proposal.apply",
            "proposal.verify",
        ]
        # At the historical moment, not when the seed ran: filed and applied within the
        # quarter hour before the switch, verified half an hour after it.
        applied = rows.get(action="proposal.apply").at
        assert switch - dt.timedelta(minutes=15) < applied < switch
        assert rows.get(action="proposal.verify").at == switch + dt.timedelta(minutes=30)
        assert rows.get(action="proposal.approve").actor_name == "approver"
        assert rows.get(action="proposal.checks_passed").actor_name == "system"
        assert proposal.created_at < switch
    # The replicas each proposal replaced stopped when it was applied, in its change.
    stops = AuditEntry.objects.filter(host__name="infer-01", action="deployment.stop")
    assert stops.count() == 8
    assert all(stop.at < switch and stop.actor_name == "oncall" for stop in stops)

    # Waiting for the approver once the history is in: one passed its gates, one failed
    # gate 1 by card.
    approver = get_user_model().objects.get(username="approver")
    ready = list(Proposal.objects.awaiting(approver))
    failed = list(Proposal.objects.failed_checks(approver))
    assert [(p.action, p.served_model.name, p.host.name) for p in ready] == [
        ("resize", "embed-small", "infer-01")
    ]
    assert [(p.action, p.served_model.name, p.host.name) for p in failed] == [
        ("add", "chat-large", "a100-node")
    ]
    memory = failed[0].gate_results.get(revision=failed[0].revision, gate="memory")
    assert not memory.passed
    assert "a100-node:2" in memory.summary
    assert "a100-node:2 is short by" in memory.summary
    # The approver's inbox has each in its section.
    client.force_login(approver)
    body = client.get("/proposals/inbox/").content.decode()
    waiting, failed_section = body.split('id="inbox-failed"', 1)
    assert f'data-proposal="{ready[0].pk}"' in waiting
    assert f'data-proposal="{failed[0].pk}" data-gate="memory"' in failed_section
