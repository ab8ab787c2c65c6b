"""How batches travel from host agents to the ingest workers: plain JSON messages on a queue.

Not Celery tasks: the ingest workers take them off the queue in groups and write each group in
one transaction, which one-task-per-message cannot do.
"""

from collections.abc import Callable

from kombu import Connection, Exchange, Queue

INGEST_QUEUE = Queue("ingest", Exchange("ingest", type="direct"), routing_key="ingest")


def batch_publisher(connect: Callable[[], Connection]):
    """A publish(batch) for the HostRuntime: raises when the broker is away, never retries.

    It returns only once the broker has the batch, so the outbox may drop it: on RabbitMQ the
    connection confirms each publish (`confirm_publish`, console.broker) and raises on a nack;
    on Redis the push is itself answered. A connection per flush (every few seconds) costs
    little and never leaves a dead one behind after an outage.
    """

    def publish(batch: dict) -> None:
        with connect() as connection:
            connection.Producer().publish(
                batch,
                exchange=INGEST_QUEUE.exchange,
                routing_key=INGEST_QUEUE.routing_key,
                declare=[INGEST_QUEUE],
                serializer="json",
                delivery_mode=2,  # persistent: a broker restart keeps it
                retry=False,
            )

    return publish
