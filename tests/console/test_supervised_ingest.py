"""The launcher's supervisor brings a killed ingest worker back, and ingest goes on.

A real `manage.py ingest_worker` on the test database and a folder broker of this test's own.
"""

import os
import signal
import sys
import time

import pytest
from kombu import Connection

from console.supervisor import RestartPolicy, Supervisor
from inventory.agent.transport import batch_publisher
from inventory.models import CardSample
from inventory.wire.broker import broker_transport_options
from tests.batches import GIB, agent_secrets, batch, card_row
from tests.factories import GpuFactory
from tests.processes import BASE_DIR, database_url_for_processes, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

BANNER = "ingest worker: groups of up to"


@pytest.fixture
def supervisor(tmp_path, monkeypatch):
    # The folder broker whatever CELERY_BROKER_URL says: its folder is this test's alone.
    monkeypatch.setenv("CELERY_BROKER_URL", "")
    monkeypatch.setenv("CELERY_FILESYSTEM_BROKER_DIR", str(tmp_path / "broker"))
    env = {**os.environ, "DATABASE_URL": database_url_for_processes(), "PYTHONUNBUFFERED": "1"}
    said, echoed = [], []
    supervisor = Supervisor(
        env, cwd=BASE_DIR, policy=RestartPolicy(0.5, 2.0), say=said.append, echo=echoed.append
    )
    supervisor.said, supervisor.echoed = said, echoed
    yield supervisor
    supervisor.stop_all(grace_s=10)


def _polling(supervisor, predicate):
    def check():
        supervisor.poll()
        return predicate()

    return check


def test_an_ingest_worker_killed_with_sigkill_is_restarted_and_writes_the_next_batch(supervisor):
    gpu = GpuFactory()
    logs = lambda: "\n".join(supervisor.said + supervisor.echoed[-60:])  # noqa: E731
    banners = lambda: sum(BANNER in line for line in supervisor.echoed)  # noqa: E731
    supervisor.start("ingest", [sys.executable, "manage.py", "ingest_worker", "--max-wait", "0.2"])
    wait_for(_polling(supervisor, lambda: banners() == 1), 60, "the ingest worker", logs)

    killed = supervisor.pid("ingest")
    os.kill(killed, signal.SIGKILL)
    wait_for(_polling(supervisor, lambda: banners() == 2), 60, "its restart", logs)
    assert any(line.startswith("ingest exited (killed by SIGKILL)") for line in supervisor.said)
    assert supervisor.pid("ingest") != killed

    options = broker_transport_options()
    publish = batch_publisher(
        lambda: Connection("filesystem://", transport_options=options), agent_secrets()
    )
    now = time.time()
    card = card_row(gpu, used_max=GIB, used_last=GIB)
    publish(batch(gpu.host, start=now - 10, end=now, cards=[card]))
    wait_for(
        _polling(supervisor, CardSample.objects.filter(gpu=gpu).exists),
        60,
        "the batch published after the restart",
        logs,
    )
