"""The central ingest worker: takes batches off the `ingest` queue in groups and writes them.

A group is up to `max_group` messages or whatever arrived within `max_wait_s`, written in one
transaction (inventory.timeseries.ingest) and acknowledged only after the commit; the default
of 500 measured faster than 200 (tests/bench/bench_ingest.py). A database
outage leaves the group unacknowledged and retried until the database is back; a worker that
dies mid-group has its messages redelivered, and the batch ids make the rewrite a no-op.
"""

import logging
import time

import orjson
from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections
from kombu import Connection, Producer, Queue
from kombu.mixins import ConsumerMixin

from inventory.agent.transport import INGEST_QUEUE
from inventory.timeseries.ingest import BatchRejected, ingest_batches

log = logging.getLogger(__name__)

DEAD_LETTER_QUEUE = Queue("ingest.failed", INGEST_QUEUE.exchange, routing_key="ingest.failed")
# Beyond outages, a database error is more likely a bug than weather: a few tries, then the
# group goes to ingest.failed for a person to look at, rather than spinning for ever.
MAX_OTHER_ERRORS = 5


def backoff(attempt: int) -> float:
    return float(min(60, 2 ** min(attempt, 6)))


class IngestWorker(ConsumerMixin):
    def __init__(self, connection: Connection, *, max_group: int = 500, max_wait_s: float = 0.5):
        self.connection = connection
        self.max_group = max_group
        self.max_wait_s = max_wait_s
        self.pending: list = []
        self._first_at = 0.0
        self._retry_at = 0.0
        self._outage_attempts = 0
        self._other_errors = 0
        self.written = 0

    def get_consumers(self, Consumer, channel):
        # on_message, not callbacks: the body is decoded here with orjson, several times
        # faster than kombu's json on batches this size.
        consumer = Consumer(queues=[INGEST_QUEUE], on_message=self.on_message, no_ack=False)
        consumer.qos(prefetch_count=self.max_group)
        return [consumer]

    def on_message(self, message) -> None:
        try:
            body = orjson.loads(message.body)
        except orjson.JSONDecodeError as error:
            log.error("dropping a message that is not JSON: %s", error)
            message.ack()
            return
        if not self.pending:
            self._first_at = time.monotonic()
        self.pending.append((body, message))
        if len(self.pending) >= self.max_group:
            self.flush()

    def on_iteration(self) -> None:
        if self.pending and time.monotonic() - self._first_at >= self.max_wait_s:
            self.flush()

    def flush(self) -> None:
        if not self.pending or time.monotonic() < self._retry_at:
            return
        try:
            results = ingest_batches([body for body, _ in self.pending])
        except (OperationalError, InterfaceError) as outage:
            self._outage_attempts += 1
            self._hold(outage, backoff(self._outage_attempts))
            return
        except DatabaseError as error:
            self._other_errors += 1
            if self._other_errors < MAX_OTHER_ERRORS:
                self._hold(error, backoff(self._other_errors))
                return
            log.exception(
                "ingest failed %d times; moving the group to ingest.failed", MAX_OTHER_ERRORS
            )
            self._dead_letter()
            return
        for (body, message), result in zip(self.pending, results, strict=True):
            if isinstance(result, BatchRejected):
                log.error("batch %s rejected: %s", _batch_id(body), result)
            message.ack()
        self.written += sum(1 for result in results if not isinstance(result, BatchRejected))
        self.pending.clear()
        self._outage_attempts = self._other_errors = 0

    def _hold(self, error: Exception, delay: float) -> None:
        log.warning("ingest of %d batches failed (%s); retrying in %.0f s", len(self.pending),
                    error, delay)  # fmt: skip
        close_old_connections()
        self._retry_at = time.monotonic() + delay

    def _dead_letter(self) -> None:
        producer = Producer(self.connection.default_channel)
        for body, message in self.pending:
            producer.publish(
                body,
                exchange=DEAD_LETTER_QUEUE.exchange,
                routing_key=DEAD_LETTER_QUEUE.routing_key,
                declare=[DEAD_LETTER_QUEUE],
                serializer="json",
                delivery_mode=2,
            )
            message.ack()
        self.pending.clear()
        self._other_errors = 0


def _batch_id(body) -> str:
    return body.get("batch_id", "?") if isinstance(body, dict) else "?"
