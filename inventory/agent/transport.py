"""How batches travel from host agents to the ingest workers: plain JSON messages on a queue.

Not Celery tasks: the ingest workers take them off the queue in groups and write each group in
one transaction, which one-task-per-message cannot do. Each body is the batch's JSON, its
process rows as columns (inventory.wire.columns), signed with its host's secret
in a header (inventory.wire.signing), and travels zlib-compressed
(inventory.wire.compression): the signature covers the JSON, not the compressed bytes.
"""

from collections.abc import Callable

from kombu import Connection

from inventory.wire import signing
from inventory.wire.compression import BATCH_COMPRESSION
from inventory.wire.queue import INGEST_QUEUE
from inventory.wire.schema import on_the_wire


def batch_publisher(connect: Callable[[], Connection], secret_for: Callable[[str], str | None]):
    """A publish(batch) for the HostRuntime: raises when the broker is away, never retries.

    `secret_for(host)` is the host's secret, or None where the agent has none (the batch then
    goes unsigned, and ingest keeps it as a dead letter that says so). It returns only once
    the broker has the batch, so the outbox may drop it: on RabbitMQ the connection confirms
    each publish (`confirm_publish`, inventory.wire.broker) and raises on a nack; on Redis the
    push is itself answered. A connection per flush (every few seconds) costs little and never
    leaves a dead one behind after an outage.
    """

    def publish(batch: dict) -> None:
        body = signing.encode(on_the_wire(batch))
        secret = secret_for(batch["host"])
        headers = {signing.HEADER: signing.sign(secret, body)} if secret else {}
        with connect() as connection:
            connection.Producer().publish(
                body,
                content_type="application/json",
                content_encoding="utf-8",
                headers=headers,
                compression=BATCH_COMPRESSION,
                exchange=INGEST_QUEUE.exchange,
                routing_key=INGEST_QUEUE.routing_key,
                declare=[INGEST_QUEUE],
                delivery_mode=2,  # persistent: a broker restart keeps it
                retry=False,
            )

    return publish


def outcome_reporter(app, secret_for: Callable[[str], str | None], queue: str):
    """A report(outcome) for host actions: a task for the console's workers, its body signed
    with the host's secret so that no one else can claim an action ran."""

    def report(outcome: dict) -> None:
        body = signing.encode(outcome).decode()
        secret = secret_for(str(outcome.get("host") or ""))
        signature = signing.sign(secret, body.encode()) if secret else None
        app.send_task("operations.record_action_outcome", args=[body, signature], queue=queue)

    return report


def plan_requester(app, secret_for: Callable[[str], str | None], queue: str):
    """A request_plan(host, digest) for the agent: a task for the console's workers, signed
    with the host's secret like an outcome, since the console answers only its host's agent.
    It expires: a request the console did not take in time is asked again by the agent."""

    def request_plan(host: str, digest: str | None) -> None:
        body = signing.encode({"host": host, "digest": digest}).decode()
        secret = secret_for(host)
        signature = signing.sign(secret, body.encode()) if secret else None
        app.send_task("inventory.plan_requested", args=[body, signature], queue=queue, expires=60)

    return request_plan
