"""The broker's transport options: the folder broker's folders, appearing on first use only;
Redis's visibility timeout, held above the task time limit; RabbitMQ's publisher confirms."""

from kombu import Connection

from console.broker import FolderTransport, broker_transport_options, broker_url
from console.checks import visibility_timeout_outlasts_tasks


def test_the_folder_broker_makes_its_folders_on_first_use_only(monkeypatch, tmp_path):
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.setenv("CELERY_FILESYSTEM_BROKER_DIR", str(tmp_path / "broker"))
    options = broker_transport_options()
    assert options["data_folder_in"] == str(tmp_path / "broker" / "queue")
    assert not (tmp_path / "broker").exists()
    # A plain kombu connection, as the ingest worker and /readyz open, gets the same transport.
    with Connection(broker_url(), transport_options=options) as connection:
        assert isinstance(connection.transport, FolderTransport)
        queue = connection.SimpleQueue("probe")
        queue.put({"hello": "folder"})
        assert sorted(path.name for path in (tmp_path / "broker").iterdir()) == [
            "control",
            "queue",
        ]
        assert queue.get(timeout=5).payload == {"hello": "folder"}
        queue.close()


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
