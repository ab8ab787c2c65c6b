"""The central ingest worker: takes batches off the `ingest` queue in groups and writes them.

A group is up to `max_group` messages or whatever arrived within `max_wait_s`, written in one
transaction (inventory.ingest.writer) and acknowledged only after the commit; the default
of 500 measured faster than 200 (tests/bench/bench_ingest.py).

Nothing one message holds can stop the others:
- a message that is not JSON, too large, not signed by the host it names
  (inventory.ingest.signatures) or fails the batch check is kept as a dead letter
  (inventory.ingest.dead_letters) with its reason, and acknowledged;
- any other error while writing a group splits it in halves, each written on its own, down to
  the one batch that fails, which becomes a dead letter: the healthy ones land;
- the database being unreachable is weather, not poison: the whole group waits, with growing
  pauses, until it is back, and nothing is dead-lettered for it.
A worker that dies mid-group has its messages redelivered, and the batch ids make the rewrite
a no-op.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson
from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections
from django.db import connection as database
from kombu import Connection
from kombu.exceptions import OperationalError as KombuOperationalError
from kombu.mixins import ConsumerMixin

from inventory.ingest.dead_letters import Letter, keep
from inventory.ingest.redis_groups import GroupTaker
from inventory.ingest.signatures import Signed, check_signatures
from inventory.ingest.writer import ingest_batches
from inventory.wire import decoding as batch_decoding
from inventory.wire import signing
from inventory.wire.compression import MAX_BATCH_BYTES, bound_decompression
from inventory.wire.queue import INGEST_QUEUE
from inventory.wire.schema import BatchRejected

log = logging.getLogger(__name__)

# A group: up to this many batches, or what arrived within this many seconds of its first.
GROUP = 500
GROUP_WAIT_S = 0.5


def freeze_what_started() -> None:
    """Leave everything alive once the worker has started (Django, its apps, the models) out of
    the cyclic garbage collector's passes. A group allocates some hundred thousand dicts and
    lists of decoded batches; each pass they set off walked every object of the process
    again: a tenth to a fifth of the writer's time on bench_ingest's batches, measured with
    and without the freeze.
    Call once, from the process that runs the worker."""
    gc.collect()
    gc.freeze()


def backoff(attempt: int) -> float:
    return float(min(60, 2 ** min(attempt, 6)))


def reconnect_backoff(attempt: int) -> float:
    """A broker reconnect costs one refused connection: tried often, so that a returning
    broker is drained within seconds."""
    return min(5.0, 0.5 * 2 ** min(attempt, 4))


@dataclass
class _Pending:
    body: bytes
    payload: Any
    message: Any
    signature: str | None = None
    rejected: BatchRejected | None = None


class _Outage(Exception):
    """The database cannot be reached: hold the group, dead-letter nothing."""


class IngestWorker(ConsumerMixin):
    def __init__(
        self, connection: Connection, *, max_group: int = GROUP, max_wait_s: float = GROUP_WAIT_S
    ):
        self.connection = connection
        self.max_group = max_group
        self.max_wait_s = max_wait_s
        self.pending: list[_Pending] = []
        self._first_at = 0.0
        self._retry_at = 0.0
        self._outage_attempts = 0
        self.written = 0
        self.dead_lettered = 0
        bound_decompression(MAX_BATCH_BYTES)

    def run(self, _tokens: int = 1, **kwargs) -> None:
        """Consume until stopped; over Redis a group at a time (redis_groups), else kombu's
        consumer with a prefetch window of one group."""
        if self.connection.transport.driver_type == "redis":
            return self.run_in_groups(**kwargs)
        return super().run(_tokens, **kwargs)

    def run_in_groups(self, safety_interval: float = 1.0, **kwargs) -> None:
        """Over Redis: a group taken and acked per round trip; a broker that goes away is
        waited for, with the group in hand kept (its messages stay booked as unacked)."""
        acked: list[str] = []
        failures = 0
        while not self.should_stop:
            try:
                taker = GroupTaker(self.connection, INGEST_QUEUE, acked)
                failures = 0
                self._take_groups(taker, safety_interval)
            except (*self.connection.connection_errors, KombuOperationalError) as error:
                # kombu wraps a refused reconnect in its OperationalError, which is not among
                # the transport's connection errors: both mean the broker is away.
                failures += 1
                pause = reconnect_backoff(failures)
                log.warning("the broker is away (%s); trying again in %.1f s", error, pause)
                with contextlib.suppress(Exception):
                    self.connection.release()
                self.connection = self.connection.clone()
                time.sleep(pause)

    def _take_groups(self, taker: GroupTaker, safety_interval: float) -> None:
        while not self.should_stop:
            room = self.max_group - len(self.pending)
            taken = taker.take(room) if room > 0 else []
            for message in taken:
                self.add(message.body, message)
            if len(self.pending) >= self.max_group:
                self.flush()
            else:
                self.on_iteration()
            taker.flush_acks()
            if not taken:  # the queue is empty, or the group waits for the database
                time.sleep(min(safety_interval, max(self.max_wait_s, 0.01)))

    def get_consumers(self, Consumer, channel):
        # on_message, not callbacks: the body is decoded here (batch_decoding), several times
        # faster than kombu's json on batches this size.
        consumer = Consumer(queues=[INGEST_QUEUE], on_message=self.on_message, no_ack=False)
        consumer.qos(prefetch_count=self.max_group)
        return [consumer]

    def on_message(self, message) -> None:
        body = message.body if isinstance(message.body, bytes) else str(message.body).encode()
        self.add(body, message)
        if len(self.pending) >= self.max_group:
            self.flush()

    def on_decode_error(self, message, exc: Exception) -> None:
        """kombu could not decode the body (an unknown compression, a bomb): a dead letter."""
        self.add(message.body if isinstance(message.body, bytes) else b"", message, exc)
        if len(self.pending) >= self.max_group:
            self.flush()

    def add(self, body: bytes, message, undecodable: Exception | None = None) -> None:
        """Queue one message for the next group; what cannot be a batch is marked already."""
        headers = getattr(message, "headers", None) or {}
        signature = headers.get(signing.HEADER)
        item = _Pending(body, None, message, signature if isinstance(signature, str) else None)
        errors = getattr(message, "errors", None)
        undecodable = undecodable or (errors[0][1] if errors else None)
        if undecodable is not None:
            item.rejected = BatchRejected("undecodable", "error", error=str(undecodable)[:500])
        elif len(body) > MAX_BATCH_BYTES:
            item.rejected = BatchRejected(
                "too_large", "bytes", size=len(body), limit=MAX_BATCH_BYTES
            )
        else:
            try:
                item.payload = batch_decoding.decode(body)
            except orjson.JSONDecodeError as error:
                item.rejected = BatchRejected("not_json", "error", error=str(error))
        if not self.pending:
            self._first_at = time.monotonic()
        self.pending.append(item)

    def on_iteration(self) -> None:
        if self.pending and time.monotonic() - self._first_at >= self.max_wait_s:
            self.flush()

    def flush(self) -> None:
        if not self.pending or time.monotonic() < self._retry_at:
            return
        try:
            written, letters = self._write(self.pending)
            self._keep(letters)
        except _Outage as outage:
            self._outage_attempts += 1
            self._hold(outage.__cause__ or outage, backoff(self._outage_attempts))
            return
        self._ack(self.pending)
        for letter in letters:
            log.error("dead letter (%s): %s", letter.rejected.code, letter.rejected)
        self.written += written
        self.dead_lettered += len(letters)
        self.pending.clear()
        self._outage_attempts = 0

    def _ack(self, items: list[_Pending]) -> None:
        """Over AMQP one frame a group: an ack with `multiple` covers every delivery on its
        channel up to its tag, and a worker takes nothing new while it writes a group. Other
        transports ack message by message (kombu's virtual channels ignore `multiple`)."""
        if self.connection is None or self.connection.transport.driver_type != "amqp":
            for item in items:
                item.message.ack()
            return
        last: dict[int, Any] = {}
        for item in items:
            channel = id(item.message.channel)
            if channel not in last or item.message.delivery_tag > last[channel].delivery_tag:
                last[channel] = item.message
        for message in last.values():
            message.ack(multiple=True)

    def _write(self, items: list[_Pending]) -> tuple[int, list[Letter]]:
        self._check_signatures([item for item in items if item.rejected is None])
        letters = [Letter(i.body, i.payload, i.rejected, i.signature) for i in items if i.rejected]
        batches = [item for item in items if item.rejected is None]
        written = 0
        for item, result in zip(batches, self._ingest_isolating(batches), strict=True):
            if isinstance(result, BatchRejected):
                letters.append(Letter(item.body, item.payload, result, item.signature))
            elif not result.duplicate:
                written += 1
        return written, letters

    @staticmethod
    def _check_signatures(items: list[_Pending]) -> None:
        try:
            answers = check_signatures([Signed(i.payload, i.body, i.signature) for i in items])
        except Exception as error:
            if _is_outage(error):
                raise _Outage(str(error)) from error
            raise
        for item, rejected in zip(items, answers, strict=True):
            item.rejected = rejected

    @staticmethod
    def _keep(letters: list[Letter]) -> None:
        if not letters:
            return
        try:
            keep(letters)
        except Exception as error:
            if _is_outage(error):
                raise _Outage(str(error)) from error
            raise

    def _ingest_isolating(self, items: list[_Pending]) -> list:
        """Results for `items`, splitting the group around any batch whose write fails."""
        if not items:
            return []
        try:
            return ingest_batches([item.payload for item in items])
        except Exception as error:
            if _is_outage(error):
                raise _Outage(str(error)) from error
            if len(items) == 1:
                return [
                    BatchRejected("write_failed", "error", error=f"{type(error).__name__}: {error}")
                ]
            log.warning("a group of %d failed (%s: %s); writing its halves apart", len(items),
                        type(error).__name__, error)  # fmt: skip
            middle = len(items) // 2
            return self._ingest_isolating(items[:middle]) + self._ingest_isolating(items[middle:])

    def _hold(self, error: BaseException, delay: float) -> None:
        log.warning("ingest of %d batches waits for the database (%s); retrying in %.0f s",
                    len(self.pending), error, delay)  # fmt: skip
        close_old_connections()
        self._retry_at = time.monotonic() + delay


def _is_outage(error: Exception) -> bool:
    """A lost or refused connection; a statement that fails on a live database is not one."""
    return isinstance(error, OperationalError | InterfaceError) and not database_reachable()


def database_reachable() -> bool:
    try:
        database.close()
        database.ensure_connection()
    except DatabaseError:
        return False
    return True
