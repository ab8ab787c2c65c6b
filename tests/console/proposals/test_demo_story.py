"""The demo's story through the workflow: the 8-card host's switch as three proposals, and two
proposals waiting for the approver: one from the seed on, one once the 8-card host's history
is in (before the rest of the fleet's)."""

import datetime as dt
import io
import time

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from console.core.models import AuditEntry
from console.proposals.models import Decision, Proposal
from console.proposals.transitions import State
from inventory.demo_history import backfill, host_history_written
from inventory.models import IngestedBatch

pytestmark = pytest.mark.django_db

DAYS = 2


def _seed_demo():
    call_command("seed_demo", "--history-days", "0", stdout=io.StringIO())


def _seed(spy=None):
    _seed_demo()
    now = time.time()
    if spy is not None:
        host_history_written.connect(spy, dispatch_uid="test-spy")
    try:
        backfill(days=DAYS, now=now, only={"infer-01", "a100-node"})
    finally:
        host_history_written.disconnect(dispatch_uid="test-spy")
    return dt.datetime.fromtimestamp(now - DAYS * 86400 / 2, tz=dt.UTC)


def _waiting(approver) -> tuple[list, list]:
    def described(proposals):
        return [(p.action, p.served_model.name, p.host.name) for p in proposals]

    return (
        described(Proposal.objects.awaiting(approver)),
        described(Proposal.objects.failed_checks(approver)),
    )


def test_the_seed_alone_has_the_proposal_failing_gate_1_waiting_and_only_once(client):
    # Before any history (`make run` queues it): the approver's inbox is not empty.
    _seed_demo()
    assert not IngestedBatch.objects.exists()
    approver = get_user_model().objects.get(username="approver")
    assert _waiting(approver) == ([], [("add", "chat-large", "a100-node")])
    failed = Proposal.objects.failed_checks(approver).get()
    memory = failed.gate_results.get(revision=failed.revision, gate="memory")
    assert not memory.passed and "a100-node:2 is short by" in memory.summary
    client.force_login(approver)
    body = client.get("/proposals/inbox/").content.decode()
    assert f'data-proposal="{failed.pk}" data-gate="memory"' in body.split('id="inbox-failed"')[1]
    # A second `make run` seeds again: nothing is filed twice.
    _seed_demo()
    assert Proposal.objects.count() == 1


def test_the_switch_is_three_proposals_through_the_workflow_dated_then(client):
    # What waits for the approver when each host's history is in: the 8-card host's goes
    # first, and its resize is filed before the next host's history is written.
    seen = []

    def spy(sender, *, host, **kwargs):
        seen.append((host, list(Proposal.objects.filter(action="resize").values_list(
            "host__name", flat=True))))  # fmt: skip

    switch = _seed(spy)
    assert seen == [("infer-01", ["infer-01"]), ("a100-node", ["infer-01"])]
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
        # Its engine, registered with the host agent once it ran, in the change that applied it.
        registered = AuditEntry.objects.get(
            action="deployment.change", object_id=str(proposal.deployment.pk)
        )
        assert sorted(registered.changed_fields) == ["endpoint_url", "runtime_name"]
        assert registered.after["runtime_name"] == proposal.deployment.runtime_name != ""
        assert registered.actor_name == "oncall"
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
        assert registered.at == applied
        assert registered.change_id == rows.get(action="proposal.apply").change_id
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
    assert _waiting(approver) == (
        [("resize", "embed-small", "infer-01")],
        [("add", "chat-large", "a100-node")],
    )
    ready = list(Proposal.objects.awaiting(approver))
    failed = list(Proposal.objects.failed_checks(approver))
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
