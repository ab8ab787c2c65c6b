"""Beat's collection plans on the broker: a host whose agent is away does not pile them up."""

import pytest

from inventory.collection import agent_queue
from inventory.models import Host
from inventory.tasks import send_collection_plan
from tests.factories import HostFactory

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


def test_an_away_agent_finds_one_plan_waiting_not_one_per_period(isolated_broker):
    host = HostFactory(name="gpu-away", collector=Host.Collector.NVML)
    queue = agent_queue(host)
    isolated_broker.purge(queue)
    with isolated_broker.publishing():
        for _ in range(5):  # five periods of beat while no agent takes anything
            send_collection_plan(host.pk)
        (plan,) = _waiting(isolated_broker, queue)
        assert plan.headers["task"] == "agent.apply_plan"
        # A stale plan carries its expiry: the agent drops it rather than apply it late.
        assert plan.headers["expires"]
        # The agent is back and took what waited: the next period sends the current plan.
        send_collection_plan(host.pk)
        assert len(_waiting(isolated_broker, queue)) == 1
