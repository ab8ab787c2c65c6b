"""The broker's transport options: the folder broker's folders, appearing on first use only;
Redis's visibility timeout, held above the task time limit; RabbitMQ's publisher confirms."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from queue import Empty

import pytest
from amqp.exceptions import NotFound
from kombu import Connection

from console.checks import visibility_timeout_outlasts_tasks
from inventory.wire.broker import (
    BASE_DIR,
    FOLDER_POLL_S,
    FolderTransport,
    broker_transport_options,
    broker_url,
)
from tests.deploy.as_the_unit import UNIT_UID
from tests.inventory.test_outages import REDIS, PrivateRedis

RABBITMQ = ("127.0.0.1", 5672)


def test_the_folder_broker_makes_its_folders_on_first_use_only(monkeypatch, tmp_path):
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.setenv("CELERY_FILESYSTEM_BROKER_DIR", str(tmp_path / "broker"))
    options = broker_transport_options()
    assert options["data_folder_in"] == str(tmp_path / "broker" / "queue")
    assert not (tmp_path / "broker").exists()
    # A plain kombu connection, as the ingest worker and /readyz open, gets the same transport.
    with Connection(broker_url(), transport_options=options) as connection:
        assert isinstance(connection.transport, FolderTransport)
        # A prefetch-1 worker looks for its next task only at the next poll.
        assert connection.transport.polling_interval == FOLDER_POLL_S < 1.0
        queue = connection.SimpleQueue("probe")
        queue.put({"hello": "folder"})
        assert sorted(path.name for path in (tmp_path / "broker").iterdir()) == [
            "control",
            "queue",
        ]
        assert queue.get(timeout=5).payload == {"hello": "folder"}
        queue.close()


def test_the_folder_broker_never_hands_out_a_message_still_being_written(monkeypatch, tmp_path):
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.setenv("CELERY_FILESYSTEM_BROKER_DIR", str(tmp_path / "broker"))
    folder = tmp_path / "broker" / "queue"
    seen_while_writing = []

    def rename_into_place(source, target):  # the moment the whole message exists
        written = Path(source).read_bytes()
        seen_while_writing.append((sorted(p.name for p in folder.glob("*.msg")), written))
        os.rename(source, target)

    monkeypatch.setattr("inventory.wire.broker.os.replace", rename_into_place)
    with Connection("filesystem://", transport_options=broker_transport_options()) as conn:
        queue = conn.SimpleQueue("half-written")
        queue.put({"whole": True})
        ((visible, written),) = seen_while_writing
        assert visible == [], "no consumer could take the message before it was whole"
        assert json.loads(written)["properties"]["delivery_info"]["routing_key"] == "half-written"
        message = queue.get(timeout=1)
        assert message.payload == {"whole": True}
        message.ack()
        with pytest.raises(Empty):
            queue.get(timeout=0.2)
        queue.close()
    assert not [path for path in folder.iterdir() if path.name.endswith(".msg")]


_TAKE_AS_ANOTHER_USER = """
import sys
from kombu import Connection
from inventory.wire.broker import broker_transport_options
with Connection("filesystem://", transport_options=broker_transport_options()) as conn:
    queue = conn.SimpleQueue(sys.argv[1])  # binds the queue root bound already
    message = queue.get(timeout=5)
    message.ack()
    print(message.payload["from"])
    queue.close()
"""


def test_on_the_folder_broker_another_user_takes_the_messages_root_wrote(monkeypatch):
    """The agent unit's user owns the folder and takes what the console's processes (root)
    wrote there, through the table root bound: kombu's own channel takes a message through
    the sticky /tmp and rewrites the table, and another user can do neither."""
    if os.geteuid() != 0:
        pytest.skip("two users on one folder: needs root")
    work = Path(tempfile.mkdtemp(prefix="folder-broker-users-"))
    try:
        work.chmod(0o755)
        folder = work / "broker"
        for sub in ("queue", "control"):
            (folder / sub).mkdir(parents=True)
        for path in (folder, *folder.iterdir()):
            os.chown(path, UNIT_UID, UNIT_UID)
        monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
        monkeypatch.setenv("CELERY_FILESYSTEM_BROKER_DIR", str(folder))
        # A name of its own: kombu remembers the bindings this process made, and binds once.
        name = f"probe-{uuid.uuid4().hex[:8]}"
        with Connection("filesystem://", transport_options=broker_transport_options()) as conn:
            conn.SimpleQueue(name).put({"from": "root"})
        assert (folder / "control" / f"{name}.exchange").stat().st_uid == 0
        taken = subprocess.run(
            ["setpriv", f"--reuid={UNIT_UID}", f"--regid={UNIT_UID}", "--clear-groups",
             sys.executable, "-c", _TAKE_AS_ANOTHER_USER, name],
            cwd=BASE_DIR, env={**os.environ, "PYTHONPATH": str(BASE_DIR)},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert taken.returncode == 0, taken.stderr
        assert taken.stdout.strip() == "root"
        assert list((folder / "queue").iterdir()) == [], "taken once, nothing left behind"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_server_broker_has_no_folders(monkeypatch):
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
    assert broker_url() == "redis://127.0.0.1:6379/0"
    assert "data_folder_in" not in broker_transport_options()


def test_redis_hands_out_unacked_messages_again_after_the_configured_visibility_timeout(
    monkeypatch,
):
    monkeypatch.setenv("CELERY_BROKER_URL", "rediss://redis.example:6380/1")
    monkeypatch.setenv("BROKER_VISIBILITY_TIMEOUT_S", "420")
    assert broker_transport_options() == {"visibility_timeout": 420.0}
    monkeypatch.delenv("BROKER_VISIBILITY_TIMEOUT_S")
    assert broker_transport_options() == {"visibility_timeout": 360.0}


def test_rabbitmq_publishes_wait_for_the_brokers_confirm(monkeypatch):
    for url in ("amqp://guest:guest@127.0.0.1:5672//", "pyamqp://a//;pyamqp://b//"):
        monkeypatch.setenv("CELERY_BROKER_URL", url)
        assert broker_transport_options() == {"confirm_publish": True}


def test_a_visibility_timeout_no_longer_than_the_task_time_limit_is_refused(settings):
    settings.CELERY_TASK_TIME_LIMIT = 300
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300.0}
    (error,) = visibility_timeout_outlasts_tasks(None)
    assert error.id == "console.E001"
    assert "BROKER_VISIBILITY_TIMEOUT_S=300 is not longer than CELERY_TASK_TIME_LIMIT=300" in (
        error.msg
    )
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 301.0}
    assert visibility_timeout_outlasts_tasks(None) == []
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"confirm_publish": True}
    assert visibility_timeout_outlasts_tasks(None) == []


@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")
def test_on_redis_a_killed_consumers_message_comes_back_after_the_visibility_timeout(monkeypatch):
    redis = PrivateRedis()
    redis.start()
    url = f"redis://127.0.0.1:{redis.port}/0"
    monkeypatch.setenv("CELERY_BROKER_URL", url)
    try:
        with Connection(url) as connection:
            connection.SimpleQueue("probe").put({"n": 1})
        # A consumer takes the message and dies before it acknowledges it.
        consumer = subprocess.Popen(
            [sys.executable, "-c", HOLD_ONE_MESSAGE], env=os.environ, stdout=subprocess.PIPE
        )
        try:
            assert consumer.stdout.readline().strip() == b"holding"
        finally:
            consumer.send_signal(signal.SIGKILL)
            consumer.wait()
        time.sleep(1.5)

        monkeypatch.setenv("BROKER_VISIBILITY_TIMEOUT_S", "360")
        assert _receive(url, seconds=2) is None  # not yet: another may still be working on it
        monkeypatch.setenv("BROKER_VISIBILITY_TIMEOUT_S", "1")
        assert _receive(url, seconds=10) == {"n": 1}
    finally:
        redis.stop()


HOLD_ONE_MESSAGE = """
import time
from kombu import Connection
from inventory.wire.broker import broker_transport_options, broker_url
with Connection(broker_url(), transport_options=broker_transport_options()) as connection:
    connection.SimpleQueue("probe").get(timeout=10)
    print("holding", flush=True)
    time.sleep(60)
"""


def _receive(url: str, *, seconds: float):
    with Connection(url, transport_options=broker_transport_options()) as connection:
        queue = connection.SimpleQueue("probe")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                message = queue.get(timeout=0.2)
            except Empty:
                continue
            message.ack()
            return message.payload
        return None


def _rabbitmq_listening() -> bool:
    try:
        socket.create_connection(RABBITMQ, timeout=0.5).close()
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _rabbitmq_listening(), reason="no RabbitMQ on 127.0.0.1:5672")
def test_on_rabbitmq_a_publish_the_broker_refuses_raises_instead_of_vanishing(monkeypatch):
    url = "amqp://guest:guest@127.0.0.1:5672//"
    nowhere = f"no-such-exchange-{uuid.uuid4()}"
    with Connection(url) as connection:
        # Without confirms the refusal comes later, on a channel no one reads: nothing raises.
        connection.Producer().publish({"n": 1}, exchange=nowhere, routing_key="x", retry=False)
    monkeypatch.setenv("CELERY_BROKER_URL", url)
    with (
        Connection(url, transport_options=broker_transport_options()) as connection,
        pytest.raises(NotFound),
    ):
        connection.Producer().publish({"n": 1}, exchange=nowhere, routing_key="x", retry=False)
