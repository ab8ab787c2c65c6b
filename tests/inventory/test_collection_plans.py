"""Collection plans on the broker: sent on change and on the agent's signed request, refreshed
slowly, never piled up for an agent that is away."""

import json

import pytest
from django.utils import timezone

from inventory import tasks
from inventory.collection import agent_queue, collection_plan
from inventory.models import Host, PlanDelivery
from inventory.tasks import plan_requested, send_collection_plans
from inventory.wire import signing
from tests.factories import DeploymentFactory, HostFactory

pytestmark = pytest.mark.django_db


def _waiting(broker, queue: str) -> list:
    with broker.connection() as conn:
        simple = conn.SimpleQueue(queue)
        taken = []
        while True:
            try:
                message = simple.get(timeout=0.2)
            except simple.Empty:
                return taken
            message.ack()
            taken.append(message)


@pytest.fixture
def sent(monkeypatch):
    """What the console sends its agents, caught instead of published; no queue waits."""
    messages = []
    monkeypatch.setattr(
        tasks.current_app,
        "send_task",
        lambda name, args, queue, expires, producer=None: messages.append(
            (name, args, queue, expires)
        ),
    )
    monkeypatch.setattr(tasks, "_waiting_counts", lambda queues: dict.fromkeys(queues, 0))
    return messages


def test_an_unchanged_fleet_gets_no_plans_a_changed_host_gets_its_own(sent, settings):
    settings.COLLECTION_PLAN_INTERVAL_S, settings.COLLECTION_PLAN_REFRESH_S = 30, 3600
    hosts = HostFactory.create_batch(300, collector=Host.Collector.NVML)
    HostFactory(name="not-collected", collector=Host.Collector.NONE)
    assert send_collection_plans() == {"changed": 300, "refreshed": 0, "held": 0}
    assert len(sent) == 300
    sent.clear()
    # Nothing changed: no plan, where the per-host beat entries sent 300.
    assert send_collection_plans() == {"changed": 0, "refreshed": 0, "held": 0}
    assert sent == []
    DeploymentFactory(host=hosts[7])
    assert send_collection_plans()["changed"] == 1
    ((name, (plan,), queue, expires),) = sent
    assert (name, queue, plan["host"]) == ("agent.apply_plan", agent_queue(hosts[7]), hosts[7].name)
    assert len(plan["deployments"]) == 1 and expires == 2 * plan["flush_interval_s"] + 60


def test_the_slow_refresh_sends_a_share_of_the_fleet_oldest_first(sent, settings):
    settings.COLLECTION_PLAN_INTERVAL_S, settings.COLLECTION_PLAN_REFRESH_S = 30, 600
    HostFactory.create_batch(40, collector=Host.Collector.NVML)
    send_collection_plans()
    sent.clear()
    an_hour_ago = timezone.now() - timezone.timedelta(hours=1)
    PlanDelivery.objects.update(sent_at=an_hour_ago)
    # 40 hosts refreshed every 600 s at a pass every 30 s: 2 a pass.
    assert send_collection_plans() == {"changed": 0, "refreshed": 2, "held": 0}
    assert PlanDelivery.objects.filter(sent_at=an_hour_ago).count() == 38


def _request(host: Host, digest, secret=None) -> tuple[str, str | None]:
    body = signing.encode({"host": host.name, "digest": digest}).decode()
    return body, signing.sign(secret or host.agent_secret, body.encode())


def test_an_agent_asking_gets_its_plan_or_word_that_its_own_still_holds(sent):
    host = HostFactory(collector=Host.Collector.NVML)
    current = collection_plan(host)["digest"]
    assert plan_requested(*_request(host, None)) == "plan"
    assert sent[-1][0] == "agent.apply_plan" and sent[-1][1][0]["digest"] == current
    assert plan_requested(*_request(host, current)) == "still valid"
    assert sent[-1][:3] == ("agent.plan_still_valid", [host.name, current], agent_queue(host))
    assert PlanDelivery.objects.get(host=host).digest == current


def test_a_plan_request_not_signed_with_the_hosts_secret_is_not_answered(sent):
    host = HostFactory(collector=Host.Collector.NVML)
    other = HostFactory(collector=Host.Collector.NVML)
    body, _ = _request(host, None)
    assert plan_requested(body, None) == "bad signature"
    assert plan_requested(*_request(host, None, secret=other.agent_secret)) == "bad signature"
    # the body changed on its way: the signature no longer covers it
    _, signature = _request(host, None)
    assert plan_requested(json.dumps({"host": host.name, "digest": "x"}), signature) == (
        "bad signature"
    )
    assert sent == []


def test_an_away_agent_finds_one_plan_waiting_not_one_per_change(isolated_broker):
    host = HostFactory(name="gpu-away", collector=Host.Collector.NVML)
    queue = agent_queue(host)
    isolated_broker.purge(queue)
    with isolated_broker.publishing():
        send_collection_plans()
        for _ in range(3):  # the plan changes three times while no agent takes anything
            DeploymentFactory(host=host)
            assert send_collection_plans()["held"] == 1
        (plan,) = _waiting(isolated_broker, queue)
        assert plan.headers["task"] == "agent.apply_plan"
        # A stale plan carries its expiry: the agent drops it rather than apply it late.
        assert plan.headers["expires"]
        # The agent is back and took what waited: the next pass sends the current plan.
        assert send_collection_plans()["changed"] == 1
        (plan,) = _waiting(isolated_broker, queue)
        body = json.loads(plan.body) if isinstance(plan.body, (str, bytes)) else plan.body
        assert len(body[0][0]["deployments"]) == 3


def test_simulated_hosts_sharing_a_queue_all_get_their_plans_in_one_pass(isolated_broker):
    hosts = HostFactory.create_batch(4, collector=Host.Collector.SIMULATED)
    queue = agent_queue(hosts[0])
    assert {agent_queue(host) for host in hosts} == {queue}
    isolated_broker.purge(queue)
    with isolated_broker.publishing():
        # The first plan this pass sent to the shared queue is not an agent away.
        assert send_collection_plans() == {"changed": 4, "refreshed": 0, "held": 0}
        assert len(_waiting(isolated_broker, queue)) == 4


def test_what_the_agents_plan_requester_sends_the_console_answers(sent):
    from inventory.agent.transport import plan_requester

    host = HostFactory(collector=Host.Collector.NVML)
    requests = []

    class App:  # the agent's Celery app, as plan_requester uses it
        def send_task(self, name, args, queue, expires):
            requests.append((name, args, queue, expires))

    plan_requester(App(), {host.name: host.agent_secret}.get, "celery")(host.name, None)
    ((name, args, queue, expires),) = requests
    assert (name, queue) == ("inventory.plan_requested", "celery") and expires
    assert plan_requested(*args) == "plan"
    assert sent[-1][1][0]["host"] == host.name
