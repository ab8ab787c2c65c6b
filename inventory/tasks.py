"""Central Celery tasks: ingest batches, send collection plans, keep partitions in shape.

They take primary keys or self-contained payloads, are idempotent, and are safe to retry.
"""

import logging

from celery import shared_task
from django.db import DatabaseError, InterfaceError, OperationalError
from django.utils import timezone

from inventory.collection import agent_queue, collection_plan
from inventory.models import Host
from inventory.timeseries import partitions
from inventory.timeseries.ingest import BatchRejected, ingest_batch

log = logging.getLogger(__name__)


# Beyond these, a database error is more likely a bug than an outage: retry a few times, then
# let the batch fail loudly rather than spin.
_MAX_OTHER_DATABASE_RETRIES = 5


@shared_task(
    bind=True,
    name="inventory.ingest_batch",
    acks_late=True,
    max_retries=None,
    time_limit=120,
    soft_time_limit=110,
)
def ingest_batch_task(self, payload: dict) -> dict:
    try:
        result = ingest_batch(payload)
    except BatchRejected as rejected:
        log.error("batch %s rejected: %s", (payload or {}).get("batch_id"), rejected)
        return {"rejected": str(rejected)}
    except (OperationalError, InterfaceError) as outage:
        # The database is away: keep the batch, however long the outage lasts.
        raise self.retry(exc=outage, countdown=_backoff(self.request.retries)) from None
    except DatabaseError as error:
        if self.request.retries >= _MAX_OTHER_DATABASE_RETRIES:
            raise
        raise self.retry(exc=error, countdown=_backoff(self.request.retries)) from None
    return {"batch_id": result.batch_id, "duplicate": result.duplicate, "rows": result.rows}


def _backoff(retries: int) -> int:
    return min(60, 2 ** min(retries, 6))


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
    from console.celery import app

    plan = collection_plan(host)
    # A plan older than two periods is stale: drop it rather than apply it late.
    app.send_task(
        "agent.apply_plan",
        args=[plan],
        queue=agent_queue(host),
        expires=2 * plan["flush_interval_s"] + 60,
    )


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
    dropped = partitions.drop_expired(now)
    if dropped:
        log.info("dropped expired telemetry partitions: %s", ", ".join(dropped))
    return dropped
