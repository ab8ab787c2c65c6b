"""Hostile batches against the real ingest worker process on a real broker.

Healthy batches of five hosts travel with a batch of every hostile kind; each hostile one
becomes a dead letter alone, with its reason, and every healthy one lands once. A batch that
passes every check but breaks the database (a trigger refuses one PID) takes no healthy batch
with it. A dead letter whose cause is fixed is replayed once.
"""

import time
import zlib

import orjson
import pytest
from django.db import connection

from inventory.models import CardSample, CollectorStatus, DeadLetter, Host
from inventory.services import AlreadyResolved, do_replay_dead_letter
from inventory.wire import signing
from inventory.wire.queue import INGEST_QUEUE
from tests.batches import GIB, agent_secrets, batch, card_row, process_row
from tests.factories import GpuFactory, HostFactory
from tests.processes import Processes, database_url_for_processes, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

POISON_PID = 31337


def _healthy(gpu, seq):
    now = time.time()
    return batch(gpu.host, start=now - 10, end=now, seq=seq,
                 cards=[card_row(gpu, used_max=2 * GIB, used_last=GIB)],
                 processes=[process_row(gpu, 1000 + seq, used_max=GIB, used_last=GIB)])  # fmt: skip


def _deep(levels: int) -> bytes:
    return b'{"a":' * levels + b"1" + b"}" * levels


def _hostile(gpu) -> dict[str, bytes]:
    """Raw message bodies, by the reason code each must be kept under."""

    def mutated(**fields):
        return orjson.dumps({**_healthy(gpu, 99), **fields})

    missing_pid = _healthy(gpu, 99)
    del missing_pid["processes"][0]["pid"]
    wrapping = _healthy(gpu, 99)
    wrapping["cards"][0]["samples"] = 40000
    return {
        "missing": orjson.dumps(missing_pid),
        "out_of_range": mutated(seq=-5),
        "in_the_future": mutated(interval_end=4102444800.0, interval_start=4102444790.0),
        "too_old": mutated(
            interval_start=time.time() - 60 * 86400, interval_end=time.time() - 60 * 86400 + 10
        ),
        "unknown_host": mutated(host="nobody-registered-me"),
        "not_json": _deep(5000),
        "bad_uuid": mutated(batch_id="robert'); DROP TABLE"),
        "nul_byte": mutated(driver_version="590\u0000"),
        "nul_byte (host)": mutated(host="gpu\u000007"),
        "unknown_schema": orjson.dumps([1, 2, 3]).replace(b"[", b'{"schema":[', 1) + b"}",
    } | {"bad_type": orjson.dumps(wrapping).replace(b'"samples":40000', b'"samples":"40000"')}


@pytest.fixture
def worker(tmp_path, isolated_broker):
    env = {"DATABASE_URL": database_url_for_processes(), **isolated_broker.env}
    processes = Processes(env, tmp_path)
    processes.start("ingest", ["manage.py", "ingest_worker", "--max-wait", "0.2"])
    yield processes, isolated_broker.connection
    processes.stop()


def _signature(body: bytes, secret_for) -> dict:
    """The header the agent of the host a body names would send (none where that host is not
    registered, or the body names none): a hostile body is refused for what it holds, not for
    lacking a signature."""
    try:
        host = orjson.loads(body).get("host")
    except (orjson.JSONDecodeError, AttributeError):
        return {}
    secret = secret_for(host) if isinstance(host, str) else None
    return {signing.HEADER: signing.sign(secret, body)} if secret else {}


def _publish(connect, bodies, headers=None, compression=None, signed=True):
    secret_for = agent_secrets()
    with connect() as conn:
        # kombu's folder transport remembers, for the whole process, the queues an earlier
        # test declared in its own folder, and would route nothing in this one.
        if hasattr(conn.transport, "state"):
            conn.transport.state.clear()
        producer = conn.Producer()
        for body in bodies:
            producer.publish(
                body,
                content_type="application/json",
                content_encoding="utf-8",
                headers={**(_signature(body, secret_for) if signed else {}), **(headers or {})},
                compression=compression,
                exchange=INGEST_QUEUE.exchange,
                routing_key=INGEST_QUEUE.routing_key,
                declare=[INGEST_QUEUE],
            )


def test_each_hostile_batch_is_a_dead_letter_alone_and_every_healthy_one_lands(worker):
    processes, connect = worker
    gpus = [GpuFactory() for _ in range(5)]
    hostile = _hostile(gpus[0])
    healthy = [orjson.dumps(_healthy(gpu, seq)) for seq in (1, 2, 3) for gpu in gpus]
    mixed = healthy[:7] + list(hostile.values()) + healthy[7:]
    _publish(connect, mixed)
    logs = lambda: processes.log("ingest")[-4000:]  # noqa: E731
    wait_for(lambda: DeadLetter.objects.count() >= len(hostile), 90, "the dead letters", logs)
    wait_for(lambda: CollectorStatus.objects.filter(batches=3).count() == 5, 60, "every host", logs)
    assert CardSample.objects.count() == len(healthy)
    expected = sorted(code.split(" ")[0] for code in hostile)
    assert sorted(DeadLetter.objects.values_list("reason_code", flat=True)) == expected


def test_compressed_batches_land_and_a_bomb_or_an_unknown_compression_is_refused(worker):
    processes, connect = worker
    gpus = [GpuFactory() for _ in range(3)]
    _publish(connect, [orjson.dumps(_healthy(gpu, 1)) for gpu in gpus], compression="zlib")
    bomb = zlib.compress(b" " * (64 * 1024 * 1024))  # 64 MiB from about 64 KiB
    _publish(connect, [bomb], headers={"compression": "application/x-gzip"})
    _publish(connect, [bomb], headers={"compression": "application/x-brotli"})
    _publish(connect, [orjson.dumps(_healthy(gpu, 2)) for gpu in gpus], compression="zlib")
    logs = lambda: processes.log("ingest")[:3000]  # noqa: E731  (the bodies come last)
    wait_for(lambda: DeadLetter.objects.count() >= 2, 90, "the dead letters", logs)
    wait_for(lambda: CardSample.objects.count() == 6, 60, "every healthy batch", logs)
    assert sorted(DeadLetter.objects.values_list("reason_code", flat=True)) == [
        "undecodable",
        "undecodable",
    ]
    assert any("more than" in r for r in DeadLetter.objects.values_list("reason", flat=True))


def test_over_redis_what_is_not_a_kombu_message_is_kept_and_stalls_nothing(worker):
    processes, connect = worker
    with connect() as conn:
        if conn.transport.driver_type != "redis":
            pytest.skip("a raw list item exists only on Redis")
        gpus = [GpuFactory() for _ in range(2)]
        _publish(connect, [orjson.dumps(_healthy(gpus[0], 1))])
        conn.default_channel.client.lpush(INGEST_QUEUE.name, b"pushed by hand, not by kombu")
        _publish(connect, [orjson.dumps(_healthy(gpus[1], 1))])
    logs = lambda: processes.log("ingest")[-4000:]  # noqa: E731
    wait_for(lambda: CardSample.objects.count() == 2, 60, "both healthy batches", logs)
    wait_for(lambda: DeadLetter.objects.exists(), 30, "the dead letter", logs)
    (letter,) = DeadLetter.objects.all()
    assert letter.reason_code == "undecodable" and "not a kombu message" in letter.reason


def test_a_batch_that_breaks_the_database_takes_no_healthy_batch_with_it(worker):
    processes, connect = worker
    with connection.cursor() as cursor:  # a constraint no check can know about
        cursor.execute(f"""
            CREATE FUNCTION refuse_poison() RETURNS trigger AS $$
            BEGIN
              IF NEW.pid = {POISON_PID} THEN RAISE EXCEPTION 'pid % refused', NEW.pid; END IF;
              RETURN NEW;
            END $$ LANGUAGE plpgsql;
            CREATE TRIGGER refuse_poison BEFORE INSERT ON inventory_process_sample
              FOR EACH ROW EXECUTE FUNCTION refuse_poison();
        """)  # fmt: skip
    try:
        gpus = [GpuFactory() for _ in range(5)]
        poison = _healthy(gpus[1], 50)
        poison["processes"][0]["pid"] = POISON_PID
        healthy = [orjson.dumps(_healthy(gpu, seq)) for seq in (1, 2, 3) for gpu in gpus]
        _publish(connect, [*healthy[:8], orjson.dumps(poison), *healthy[8:]])
        logs = lambda: processes.log("ingest")[-4000:]  # noqa: E731
        wait_for(lambda: DeadLetter.objects.exists(), 90, "the poison's dead letter", logs)
        wait_for(lambda: CardSample.objects.count() == len(healthy), 60, "every healthy", logs)
        (letter,) = DeadLetter.objects.all()
        assert letter.reason_code == "write_failed" and "pid 31337 refused" in letter.reason
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER refuse_poison ON inventory_process_sample;"
                           "DROP FUNCTION refuse_poison();")  # fmt: skip


def test_a_fixed_dead_letter_is_replayed_once_and_an_nvml_host_must_sign(worker, personas):
    processes, connect = worker
    real = GpuFactory(host=HostFactory(name="gpu-07", collector=Host.Collector.NVML))
    body = orjson.dumps(_healthy(real, 1))
    _publish(connect, [body], signed=False)  # unsigned: refused
    _publish(connect, [body], {signing.HEADER: signing.sign("a guess", body)})
    logs = lambda: processes.log("ingest")[-4000:]  # noqa: E731
    wait_for(lambda: DeadLetter.objects.count() == 2, 90, "two dead letters", logs)
    assert set(DeadLetter.objects.values_list("reason_code", flat=True)) == {
        "unsigned",
        "bad_signature",
    }
    good = orjson.dumps(_healthy(real, 2))
    _publish(connect, [good], {signing.HEADER: signing.sign(real.host.agent_secret, good)})
    wait_for(lambda: CardSample.objects.count() == 1, 60, "the signed batch", logs)

    newcomer = GpuFactory()  # a simulated host's card, its batch naming a host not yet known
    stray = orjson.dumps({**_healthy(newcomer, 1), "host": "gpu-new"})
    # Signed by its agent, with the secret it holds for the host about to be registered.
    _publish(connect, [stray], {signing.HEADER: signing.sign(newcomer.host.agent_secret, stray)})
    wait_for(lambda: DeadLetter.objects.filter(reason_code="unknown_host").exists(), 60, "it", logs)
    letter = DeadLetter.objects.get(reason_code="unknown_host")
    Host.objects.filter(pk=newcomer.host.pk).update(name="gpu-new")  # the fix: registered
    assert do_replay_dead_letter(letter, acting_user=personas["oncall"]) is None
    assert CardSample.objects.filter(gpu=newcomer).count() == 1
    with pytest.raises(AlreadyResolved):
        do_replay_dead_letter(letter, acting_user=personas["oncall"])
    assert CardSample.objects.count() == 2
