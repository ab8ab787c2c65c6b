"""One broker set-up for every end-to-end test: the processes a test starts, and this process
where it publishes, share a broker no other test reads.

On the folder broker (no `CELERY_BROKER_URL`) the test gets a folder of its own, so no old
message reaches it and no other test's worker takes its messages. On a server broker (Redis,
RabbitMQ) each xdist worker already has its own database number and ingest queue
(tests/xdist_worker.py); what an earlier test of the same worker left on the queues this test
reads is purged before it starts.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from kombu import Connection

from console.celery import app
from inventory.wire.queue import INGEST_QUEUE

# The queues every end-to-end test's processes read: the ingest worker's and the central
# Celery worker's. A test names its agent's host queue itself.
SHARED_QUEUES = (INGEST_QUEUE.name, "celery")


@dataclass(frozen=True, slots=True)
class IsolatedBroker:
    url: str
    transport_options: dict
    env: dict[str, str]  # what the test's processes need to reach this broker
    folder: Path | None  # the folder broker's folder; None on a server broker

    @classmethod
    def for_test(cls, tmp_path: Path) -> IsolatedBroker:
        options = app.conf.broker_transport_options or {}
        if "data_folder_in" not in options:
            return cls(app.conf.broker_url, dict(options), {}, None)
        folder = tmp_path / "broker"
        for sub in ("queue", "control"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        folders = {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
        }
        return cls(
            "filesystem://",
            options | folders,
            {"CELERY_FILESYSTEM_BROKER_DIR": str(folder)},
            folder,
        )

    def connection(self) -> Connection:
        return Connection(self.url, transport_options=self.transport_options)

    def purge(self, *queues: str) -> None:
        """Empties the named queues of a server broker (a folder broker starts empty)."""
        if self.folder is not None:
            return
        with self.connection() as conn:
            for queue in queues:
                channel = conn.channel()
                try:
                    channel.queue_purge(queue)
                except conn.channel_errors:
                    pass  # never declared on this broker: nothing to purge
                finally:
                    channel.close()

    @contextmanager
    def publishing(self):
        """This process's Celery app publishes here too (tasks queued by a view or a service
        reach the test's worker), with the console's app current for shared tasks."""
        from tests.console.proposals.support import console_app_current

        options = app.conf.broker_transport_options
        app.conf.broker_transport_options = self.transport_options
        _drop_producer_pools()
        try:
            with console_app_current():
                yield self
        finally:
            app.conf.broker_transport_options = options
            _drop_producer_pools()


def _drop_producer_pools() -> None:
    # Celery keeps producers connected with the transport options of its first publish.
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def isolated_broker(tmp_path) -> IsolatedBroker:
    broker = IsolatedBroker.for_test(tmp_path)
    broker.purge(*SHARED_QUEUES)
    return broker
