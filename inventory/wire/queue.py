"""The queue batches travel on, declared once for the agents that publish and the ingest
workers that consume.

Its name is `ingest` unless INGEST_QUEUE_NAME says otherwise: several consoles (or test runs)
can then share one broker without taking each other's batches.
"""

from kombu import Exchange, Queue

from inventory.env import env_str


def ingest_queue() -> Queue:
    name = env_str("INGEST_QUEUE_NAME", "ingest") or "ingest"
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


INGEST_QUEUE = ingest_queue()
