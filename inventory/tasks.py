"""Central Celery tasks: send collection plans, keep partitions in shape.

(Batches are written by the ingest worker, inventory.ingest_worker, not by a task.)

They take primary keys or self-contained payloads, are idempotent, and are safe to retry.
"""

import contextlib
import logging

from celery import current_app, shared_task
from django.db import DatabaseError
from django.utils import timezone

from inventory.collection import agent_queue, collection_plan
from inventory.demo_history import backfill
from inventory.models import Host
from inventory.timeseries import partitions, rollups

log = logging.getLogger(__name__)


@shared_task(
    name="inventory.send_collection_plan", time_limit=30, soft_time_limit=25, ignore_result=True
)
def send_collection_plan(host_id: int) -> None:
    try:
        host = Host.objects.get(pk=host_id)
    except Host.DoesNotExist:
        return
    if host.collector == Host.Collector.NONE or host.status == Host.Status.RETIRED:
        return
    queue = agent_queue(host)
    if _waiting(queue):
        # The agent has not taken what was sent last: it is away, and another plan would only
        # pile up behind it (beat sends one every period, for as long as it is gone). When it
        # is back, it takes what waits, then the next period's plan.
        log.info("%s: its agent has not taken its last message; no new plan", host.name)
        return
    plan = collection_plan(host)
    # A plan older than two periods is stale: dropped rather than applied late, by the agent
    # (Celery's expires) and on RabbitMQ by the broker too (Celery sets it as the message's
    # expiration, a per-message TTL).
    current_app.send_task(
        "agent.apply_plan",
        args=[plan],
        queue=queue,
        expires=2 * plan["flush_interval_s"] + 60,
    )


def _waiting(queue: str) -> int:
    """How many messages wait on `queue` that no consumer has taken; 0 for a queue not there
    (Redis keeps no empty queue)."""
    with current_app.connection_for_write() as connection:
        channel = connection.channel()
        try:
            return channel.queue_declare(queue=queue, passive=True).message_count
        except connection.channel_errors:
            return 0
        finally:
            # A refused passive declare has closed the channel already on AMQP.
            with contextlib.suppress(*connection.channel_errors, *connection.connection_errors):
                channel.close()


@shared_task(name="inventory.refresh_rollups", time_limit=240, soft_time_limit=230)
def refresh_rollups() -> int:
    """Fold the minutes ingest marked dirty into the rollups (idempotent; safe in parallel)."""

    return rollups.refresh()


@shared_task(
    name="inventory.maintain_partitions",
    time_limit=300,
    soft_time_limit=290,
    autoretry_for=(DatabaseError,),
    max_retries=3,
)
def maintain_partitions() -> list[str]:

    now = timezone.now()
    partitions.ensure_partitions(now, now + timezone.timedelta(days=2))
    rollups.refresh_all()  # fold in whatever is dirty before its raw samples can go
    dropped = partitions.drop_expired(now)
    if dropped:
        log.info("dropped expired telemetry partitions: %s", ", ".join(dropped))
    return dropped


@shared_task(name="inventory.backfill_demo_history", time_limit=1800, soft_time_limit=1790)
def backfill_demo_history(days: float) -> dict:
    """Simulated history for the demo fleet's hosts that have none (idempotent)."""

    return backfill(days=days, now=timezone.now().timestamp())
