"""Outages lose nothing.

The agent buffers through a broker outage; ingest waits out a database outage.
"""

import shutil
import socket
import subprocess
import time

import pytest
from celery import Celery
from celery.exceptions import Retry
from django.db import OperationalError, ProgrammingError

from inventory.agent.runtime import HostRuntime
from inventory.agent.sources import FleetSimulator
from inventory.models import CardSample
from inventory.tasks import ingest_batch_task
from tests.batches import GIB, batch, card_row
from tests.factories import GpuFactory
from tests.inventory.test_agent import MIDNIGHT, Clock, _plan, _run

REDIS = shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivateRedis:
    """A redis-server of this test's own, so it can be stopped and started again."""

    def __init__(self):
        self.port = _free_port()
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")
def test_a_broker_outage_is_backfilled_in_order_through_a_real_broker():
    redis = PrivateRedis()
    redis.start()
    app = Celery("outage", broker=f"redis://127.0.0.1:{redis.port}/0")
    app.conf.broker_connection_timeout = 1

    def publish(payload):
        app.send_task("inventory.ingest_batch", args=[payload], queue="ingest", retry=False)

    clock = Clock(MIDNIGHT + 9 * 3600)
    simulator = FleetSimulator(seed=1, clock=clock)
    runtime = HostRuntime("infer-01", simulator.source_for(_plan("infer-01")), publish)
    runtime.apply_plan(_plan("infer-01"))
    try:
        _run(runtime, clock, 11)  # batch 1 published
        redis.stop()
        _run(runtime, clock, 30)  # batches 2-4 wait in the outbox
        assert len(runtime.outbox) == 3
        redis.start()  # a fresh, empty server on the same port
        _run(runtime, clock, 10)  # batch 5: the backlog goes first
        assert len(runtime.outbox) == 0
        with app.connection_for_read() as conn:
            queue = conn.SimpleQueue("ingest")
            seqs = []
            while True:
                try:
                    message = queue.get(timeout=1)
                except queue.Empty:
                    break
                seqs.append(message.payload[0][0]["seq"])
                message.ack()
            queue.close()
        assert seqs == [2, 3, 4, 5]
    finally:
        redis.stop()


@pytest.mark.django_db
def test_ingest_waits_out_a_database_outage_and_then_writes(monkeypatch):
    gpu = GpuFactory()
    payload = batch(gpu.host, start=1_780_000_000, end=1_780_000_010,
                    cards=[card_row(gpu, used_max=GIB, used_last=GIB)])  # fmt: skip
    from inventory import tasks

    real = tasks.ingest_batch
    failures = iter([OperationalError("server closed the connection unexpectedly")] * 3)

    def flaky(data):
        failure = next(failures, None)
        if failure:
            raise failure
        return real(data)

    monkeypatch.setattr(tasks, "ingest_batch", flaky)
    countdowns = []
    monkeypatch.setattr(
        ingest_batch_task, "retry", lambda exc, countdown: countdowns.append(countdown) or Retry()
    )
    for _ in range(3):
        with pytest.raises(Retry):
            ingest_batch_task.run(payload)
    assert countdowns == [1, 1, 1]  # first retries come quickly; _backoff grows them
    assert not CardSample.objects.exists()
    ingest_batch_task.run(payload)
    assert CardSample.objects.get().gpu == gpu


@pytest.mark.django_db
def test_a_bug_is_not_retried_forever(monkeypatch):
    from inventory import tasks

    monkeypatch.setattr(
        tasks, "ingest_batch", lambda data: (_ for _ in ()).throw(ProgrammingError("bad SQL"))
    )
    ingest_batch_task.push_request(retries=tasks._MAX_OTHER_DATABASE_RETRIES)
    try:
        with pytest.raises(ProgrammingError):
            ingest_batch_task.run({"batch_id": "x"})
    finally:
        ingest_batch_task.pop_request()


def test_retries_back_off_up_to_a_minute():
    from inventory.tasks import _backoff

    assert [_backoff(n) for n in (0, 1, 2, 5, 6, 30)] == [1, 2, 4, 32, 60, 60]
