"""Outages lose nothing.

The agent buffers through a broker outage; ingest waits out a database outage.
"""

import shutil
import socket
import subprocess
import time

import pytest
from django.db import OperationalError, ProgrammingError
from kombu import Connection

from inventory.agent.runtime import HostRuntime
from inventory.agent.sources import FleetSimulator
from inventory.agent.transport import INGEST_QUEUE, batch_publisher
from inventory.models import CardSample
from inventory.timeseries import ingest_worker
from inventory.timeseries.ingest_worker import IngestWorker
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
    url = f"redis://127.0.0.1:{redis.port}/0"
    publish = batch_publisher(lambda: Connection(url, connect_timeout=1))

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
        with Connection(url) as conn:
            queue = conn.SimpleQueue(INGEST_QUEUE)
            seqs = []
            while True:
                try:
                    message = queue.get(timeout=1)
                except queue.Empty:
                    break
                seqs.append(message.payload["seq"])
                message.ack()
            queue.close()
        assert seqs == [2, 3, 4, 5]
    finally:
        redis.stop()


class Message:
    def __init__(self):
        self.acked = False

    def ack(self):
        self.acked = True


def _worker_with(*payloads):
    worker = IngestWorker(connection=None, max_group=10, max_wait_s=0)
    messages = [Message() for _ in payloads]
    worker.pending = list(zip(payloads, messages, strict=True))
    return worker, messages


# Transactional: the worker drops a broken connection, which a test transaction cannot survive.
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_ingest_waits_out_a_database_outage_and_then_writes(monkeypatch):
    gpu = GpuFactory()
    payload = batch(gpu.host, start=1_780_000_000, end=1_780_000_010,
                    cards=[card_row(gpu, used_max=GIB, used_last=GIB)])  # fmt: skip
    real = ingest_worker.ingest_batches
    outage = [OperationalError("server closed the connection unexpectedly")] * 3

    def flaky(payloads):
        if outage:
            raise outage.pop()
        return real(payloads)

    monkeypatch.setattr(ingest_worker, "ingest_batches", flaky)
    worker, (message,) = _worker_with(payload)
    for _attempt in range(3):
        worker._retry_at = 0  # the test does not wait out the backoff
        worker.flush()
        assert not message.acked, "a batch is acknowledged only once it is written"
        assert len(worker.pending) == 1
    worker._retry_at = 0
    worker.flush()
    assert message.acked
    assert worker.pending == []
    assert CardSample.objects.get().gpu == gpu


@pytest.mark.django_db
def test_a_rejected_batch_is_dropped_and_the_rest_of_its_group_written():
    gpu = GpuFactory()
    good = batch(gpu.host, start=1_780_000_000, end=1_780_000_010,
                 cards=[card_row(gpu, used_max=GIB, used_last=GIB)])  # fmt: skip
    bad = {**good, "batch_id": "not a uuid"}
    worker, messages = _worker_with(bad, good)
    worker.flush()
    assert all(message.acked for message in messages)
    assert CardSample.objects.count() == 1
    assert worker.written == 1


@pytest.mark.django_db
def test_a_bug_is_not_retried_for_ever(monkeypatch):
    def broken(payloads):
        raise ProgrammingError("column does not exist")

    monkeypatch.setattr(ingest_worker, "ingest_batches", broken)
    parked = []
    monkeypatch.setattr(IngestWorker, "_dead_letter", lambda self: parked.extend(self.pending))
    worker, _ = _worker_with({"batch_id": "x"})
    for _ in range(ingest_worker.MAX_OTHER_ERRORS):
        worker._retry_at = 0
        worker.flush()
    assert len(parked) == 1


def test_retries_back_off_up_to_a_minute():
    assert [ingest_worker.backoff(n) for n in (0, 1, 2, 5, 6, 30)] == [1, 2, 4, 32, 60, 60]
