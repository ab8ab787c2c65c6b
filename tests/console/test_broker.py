"""The folder broker: naming it writes nothing; its folders appear when a process uses it."""

from kombu import Connection

from console.broker import FolderTransport, broker_transport_options, broker_url


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
    assert broker_transport_options() == {}
