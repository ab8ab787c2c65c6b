"""How batches travel from host agents to the ingest workers: plain JSON messages on a queue.

Not Celery tasks: the ingest workers take them off the queue in groups and write each group in
one transaction, which one-task-per-message cannot do.
"""

from kombu import Exchange, Queue

INGEST_QUEUE = Queue("ingest", Exchange("ingest", type="direct"), routing_key="ingest")


def batch_publisher(app):
    """A publish(batch) for the HostRuntime: raises when the broker is away, never retries."""

    def publish(batch: dict) -> None:
        with app.producer_pool.acquire(block=True, timeout=5) as producer:
            producer.publish(
                batch,
                exchange=INGEST_QUEUE.exchange,
                routing_key=INGEST_QUEUE.routing_key,
                declare=[INGEST_QUEUE],
                serializer="json",
                delivery_mode=2,  # persistent: a broker restart keeps it
                retry=False,
            )

    return publish
