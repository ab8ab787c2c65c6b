"""End to end: a real Celery worker process runs the gates on the test database.

Create and submit here, the worker checks the gates, a second person approves, apply, and
the host's deployments and audit trail change.
"""

import pytest

from console.celery import app
from console.core.models import AuditEntry
from console.proposals import services
from console.proposals.gates import Gate
from console.proposals.models import Proposal
from console.proposals.transitions import State
from inventory.models import Deployment
from tests.console.proposals.support import (
    create_proposal,
    recent_combined_import,
    seed_host,
)
from tests.factories import GIB, ServedModelFactory
from tests.processes import Processes, database_url_for_processes, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def worker(tmp_path, isolated_broker):
    env = {"DATABASE_URL": database_url_for_processes(), **isolated_broker.env}
    processes = Processes(env, tmp_path)
    processes.celery_worker("central", "celery")
    with isolated_broker.publishing():
        yield processes
    processes.stop()
    _drop_producer_pools()


def _drop_producer_pools():
    # Celery keeps producers connected with the settings of the first publish; without this,
    # a test that published earlier in the session would send this test's tasks to var/broker.
    app._pool = None
    app.amqp._producer_pool = None


def test_a_proposal_through_the_worker_to_the_inventory(worker, personas):
    for user in (personas["oncall"], personas["approver"]):
        user.email = f"{user.username}@example.com"
        user.save()
    host = seed_host()
    card = host.gpus.get(index=1)
    before = set(host.deployments.values_list("pk", flat=True))
    proposal = create_proposal(
        personas["oncall"],
        host=host,
        gpus=[card],
        # 5 GiB of weights: the card's three co-tenants and this one each hold a CUDA context
        # too (518 MiB), so 6 GiB would leave the card 0.02 GiB short.
        model=ServedModelFactory(name="phi-3-mini", weights_bytes=5 * GIB),
        isolation_mode=Deployment.Isolation.TIME_SLICING,
        mps_acknowledged=True,
        expected_request_rate=3.0,
        # 5 + 6 GiB + context + workspace of 80 GiB, started after its neighbours.
        engine_memory_fraction=0.17,
        staggered_start=True,
    )
    run, files = recent_combined_import(card)
    services.do_attach_load_test(proposal, acting_user=personas["oncall"], run=run, files=files)
    services.do_submit(proposal, acting_user=personas["oncall"])

    def settled():
        current = Proposal.objects.get(pk=proposal.pk)
        return current if current.state not in (State.SUBMITTED, State.CHECKING) else None

    checked = wait_for(
        settled, timeout=90, what="the worker to check the gates",
        logs=lambda: worker.log("central")[-4000:],
    )  # fmt: skip
    results = {r.gate: r for r in checked.gate_results.filter(revision=checked.revision)}
    assert checked.state == State.READY, {g: r.summary for g, r in results.items()}
    assert set(results) == {gate.value for gate in Gate}
    assert results["memory"].numbers["cards"][0]["card"] == "a100-node:1"
    assert "proposals.run_gates" in worker.log("central")
    assert AuditEntry.objects.filter(action="proposal.checks_passed", actor_name="system").exists()

    with pytest.raises(services.FourEyesError):
        services.do_approve_proposal(checked, acting_user=personas["oncall"])
    approved = services.do_approve_proposal(checked, acting_user=personas["approver"])
    applied = services.do_apply(approved, acting_user=personas["oncall"])

    assert applied.state == State.APPLIED
    added = set(host.deployments.values_list("pk", flat=True)) - before
    assert added == {applied.deployment.pk}
    assert list(applied.deployment.gpus.all()) == [card]
    trail = AuditEntry.objects.filter(host=host)
    assert trail.filter(action="deployment.create", actor_name="oncall").count() == 1
    assert [e.action for e in trail.filter(content_type__app_label="proposals")][:2] == [
        "proposal.apply",
        "proposal.approve",
    ]
    # The worker mails the approvers when the gates pass, and the author on the approval.
    wait_for(
        lambda: applied.notifications.filter(status="sent").count() == 2,
        timeout=60,
        what="the worker to deliver both notifications",
        logs=lambda: worker.log("central")[-4000:],
    )
    sent = {n.event: n.recipients for n in applied.notifications.all()}
    assert sent == {
        "ready_for_approval": ["approver@example.com"],
        "approved": ["oncall@example.com"],
    }
