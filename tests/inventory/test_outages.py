"""Outages lose nothing, and no batch takes another down with it.

The agent buffers through a broker outage; ingest waits out a database outage; a batch that
cannot be written becomes a dead letter alone.
"""

import shutil
import subprocess
import threading
import time

import pytest
from django.db import OperationalError
from kombu import Connection

from inventory.agent.runtime import HostRuntime
from inventory.agent.sources import FleetSimulator
from inventory.agent.transport import batch_publisher
from inventory.ingest import worker as ingest_worker
from inventory.ingest.redis_groups import GroupTaker
from inventory.ingest.worker import IngestWorker
from inventory.models import CardSample, DeadLetter
from inventory.wire import signing
from inventory.wire.queue import INGEST_QUEUE
from tests.batches import GIB, agent_secrets, batch, card_row
from tests.factories import GpuFactory
from tests.inventory.test_agent import MIDNIGHT, Clock, _plan, _run
from tests.processes import free_port, wait_for_port

REDIS = shutil.which("redis-server")


class PrivateRedis:
    """A redis-server of this test's own, so it can be stopped and started again."""

    def __init__(self):
        self.port = free_port()
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        wait_for_port(self.port, "redis-server")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")
def test_a_broker_outage_is_backfilled_in_order_through_a_real_broker():
    redis = PrivateRedis()
    redis.start()
    url = f"redis://127.0.0.1:{redis.port}/0"
    publish = batch_publisher(lambda: Connection(url, connect_timeout=1), lambda host: None)

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
    def __init__(self, headers=None):
        self.acked = False
        self.headers = headers or {}

    def ack(self):
        self.acked = True


def _worker_with(*payloads):
    worker = IngestWorker(connection=None, max_group=10, max_wait_s=0)
    secret_for = agent_secrets()
    messages = []
    for payload in payloads:
        body = payload if isinstance(payload, bytes) else signing.encode(payload)
        secret = isinstance(payload, dict) and secret_for(str(payload.get("host")))
        messages.append(Message({signing.HEADER: signing.sign(secret, body)} if secret else {}))
        worker.add(body, messages[-1])
    return worker, messages


def _healthy(gpu, **fields):
    now = time.time()
    return {**batch(gpu.host, start=now - 10, end=now,
                    cards=[card_row(gpu, used_max=GIB, used_last=GIB)]), **fields}  # fmt: skip


# Transactional: the worker drops a broken connection, which a test transaction cannot survive.
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_ingest_waits_out_a_database_outage_and_then_writes(monkeypatch):
    gpu = GpuFactory()
    payload = _healthy(gpu)
    real = ingest_worker.ingest_batches
    database = {"down": True}

    def flaky(payloads):
        if database["down"]:
            raise OperationalError("server closed the connection unexpectedly")
        return real(payloads)

    monkeypatch.setattr(ingest_worker, "ingest_batches", flaky)
    monkeypatch.setattr(ingest_worker, "database_reachable", lambda: not database["down"])
    worker, (message,) = _worker_with(payload)
    for _attempt in range(3):
        worker._retry_at = 0  # the test does not wait out the backoff
        worker.flush()
        assert not message.acked, "a batch is acknowledged only once it is written"
        assert len(worker.pending) == 1
    database["down"] = False
    worker._retry_at = 0
    worker.flush()
    assert message.acked
    assert worker.pending == []
    assert CardSample.objects.get().gpu == gpu
    assert not DeadLetter.objects.exists(), "an outage is not the batch's fault"


@pytest.mark.django_db
def test_a_rejected_batch_is_dead_lettered_and_the_rest_of_its_group_written():
    gpu = GpuFactory()
    good = _healthy(gpu)
    bad = {**_healthy(gpu), "batch_id": "not a uuid"}
    worker, messages = _worker_with(bad, good, b"{not json")
    worker.flush()
    assert all(message.acked for message in messages)
    assert CardSample.objects.count() == 1
    assert worker.written == 1
    letters = {letter.reason_code: letter for letter in DeadLetter.objects.all()}
    assert set(letters) == {"bad_uuid", "not_json"}
    assert letters["bad_uuid"].host_name == gpu.host.name
    assert bytes(letters["not_json"].body) == b"{not json"


@pytest.mark.django_db
def test_a_batch_that_breaks_the_write_takes_no_healthy_batch_with_it(monkeypatch):
    """Whatever the error: the group is split until the one failing batch stands alone."""
    gpus = [GpuFactory() for _ in range(5)]
    healthy = [_healthy(gpu) for gpu in gpus for _ in range(3)]
    poison = _healthy(gpus[2])
    real = ingest_worker.ingest_batches

    def breaks_on_poison(payloads):
        if any(p["batch_id"] == poison["batch_id"] for p in payloads):
            raise KeyError("pid")  # a bug in ingest, not in the database
        return real(payloads)

    monkeypatch.setattr(ingest_worker, "ingest_batches", breaks_on_poison)
    worker, messages = _worker_with(*healthy[:7], poison, *healthy[7:])
    worker.flush()
    assert all(message.acked for message in messages)
    assert worker.written == len(healthy)
    assert CardSample.objects.count() == len(healthy)
    (letter,) = DeadLetter.objects.all()
    assert letter.reason_code == "write_failed" and "KeyError" in letter.reason
    assert letter.batch_id == poison["batch_id"]


@pytest.mark.django_db
def test_a_database_error_on_a_live_database_is_poison_not_an_outage(monkeypatch):
    gpu = GpuFactory()
    good, bad = _healthy(gpu), _healthy(gpu)
    real = ingest_worker.ingest_batches

    def timeout_on_bad(payloads):
        if any(p["batch_id"] == bad["batch_id"] for p in payloads):
            raise OperationalError("canceling statement due to statement timeout")
        return real(payloads)

    monkeypatch.setattr(ingest_worker, "ingest_batches", timeout_on_bad)
    monkeypatch.setattr(ingest_worker, "database_reachable", lambda: True)
    worker, messages = _worker_with(good, bad)
    worker.flush()
    assert all(message.acked for message in messages)
    assert DeadLetter.objects.get().batch_id == bad["batch_id"]
    assert CardSample.objects.count() == 1


def test_retries_back_off_up_to_a_minute():
    assert [ingest_worker.backoff(n) for n in (0, 1, 2, 5, 6, 30)] == [1, 2, 4, 32, 60, 60]


def test_broker_reconnects_back_off_up_to_five_seconds():
    assert [ingest_worker.reconnect_backoff(n) for n in (1, 2, 3, 4, 30)] == [1, 2, 4, 5, 5]


@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_over_redis_the_worker_outlives_a_broker_that_stays_away(caplog):
    """Reconnects refused one after another (kombu's OperationalError) are waited out too."""
    redis = PrivateRedis()
    redis.start()
    url = f"redis://127.0.0.1:{redis.port}/0"
    gpu = GpuFactory()
    publish = batch_publisher(lambda: Connection(url), agent_secrets())
    worker = IngestWorker(Connection(url, connect_timeout=1), max_group=10, max_wait_s=0.05)
    running = threading.Thread(target=worker.run, kwargs={"safety_interval": 0.05})
    try:
        running.start()
        time.sleep(0.5)
        redis.stop()
        deadline = time.monotonic() + 20
        while caplog.text.count("the broker is away") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert caplog.text.count("the broker is away") >= 2, "a second refusal came and went"
        assert running.is_alive()
        redis.start()
        for _ in range(3):
            publish(_healthy(gpu))
        deadline = time.monotonic() + 20
        while worker.written < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert worker.written == 3
        assert CardSample.objects.count() == 3
    finally:
        worker.should_stop = True
        running.join(10)
        redis.stop()


@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_over_redis_a_group_is_taken_in_one_call_and_a_killed_workers_group_comes_back():
    """kombu's own bookkeeping, a group at a time: what a dead worker held is restored."""
    redis = PrivateRedis()
    redis.start()
    url = f"redis://127.0.0.1:{redis.port}/0"
    gpu = GpuFactory()
    try:
        publish = batch_publisher(lambda: Connection(url), agent_secrets())
        payloads = [_healthy(gpu) for _ in range(5)]
        for payload in payloads:
            publish(payload)
        options = {"visibility_timeout": 1}
        with Connection(url, transport_options=options) as dying:
            held = GroupTaker(dying, INGEST_QUEUE).take(3)  # then the worker is gone, unacked
            assert len(held) == 3
            assert dying.default_channel.client.hlen("unacked") == 3
        time.sleep(1.5)  # past the visibility timeout
        with Connection(url, transport_options=options) as conn:
            worker = IngestWorker(conn, max_group=10, max_wait_s=0.05)
            stopper = threading.Timer(4.0, lambda: setattr(worker, "should_stop", True))
            stopper.start()
            worker.run(safety_interval=0.05)
            assert conn.default_channel.client.hlen("unacked") == 0
            assert conn.default_channel.client.llen(INGEST_QUEUE.name) == 0
        assert worker.written == 5, "the three restored and the two never taken, once each"
        assert CardSample.objects.count() == 5
    finally:
        redis.stop()


def _rabbitmq_up() -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _rabbitmq_up(), reason="RabbitMQ is not running on 127.0.0.1:5672")
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_over_rabbitmq_a_group_is_acked_in_one_frame_and_nothing_stays_unacked(monkeypatch):
    import amqp

    url = "amqp://guest:guest@127.0.0.1:5672//"
    gpu = GpuFactory()
    acks = []
    real_ack = amqp.Channel.basic_ack

    def counted(channel, delivery_tag, multiple=False, **kwargs):
        acks.append((delivery_tag, multiple))
        return real_ack(channel, delivery_tag, multiple, **kwargs)

    monkeypatch.setattr(amqp.Channel, "basic_ack", counted)
    with Connection(url) as conn:
        INGEST_QUEUE(conn.default_channel).declare()
        INGEST_QUEUE(conn.default_channel).purge()
    publish = batch_publisher(lambda: Connection(url), agent_secrets())
    for _ in range(7):
        publish(_healthy(gpu))
    publish({"schema": "gpu-telemetry-batch/1", "host": "poison"})  # a dead letter, acked too
    with Connection(url) as conn:
        worker = IngestWorker(conn, max_group=3, max_wait_s=0.2)
        stopper = threading.Timer(4.0, lambda: setattr(worker, "should_stop", True))
        stopper.start()
        worker.run()
    assert (worker.written, worker.dead_lettered) == (7, 1)
    assert CardSample.objects.count() == 7
    # Three groups of three, each acked once for all of it, with every later tag above.
    assert [multiple for _, multiple in acks] == [True, True, True]
    assert [tag for tag, _ in acks] == sorted(tag for tag, _ in acks)
    with Connection(url) as conn:  # the worker's connection is closed: unacked would be back
        _, ready, _ = conn.default_channel.queue_declare(INGEST_QUEUE.name, passive=True)
    assert ready == 0
