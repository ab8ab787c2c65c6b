"""Central Celery tasks: send collection plans, keep partitions in shape.

(Batches are written by the ingest worker, inventory.ingest_worker, not by a task.)

They take primary keys or self-contained payloads, are idempotent, and are safe to retry.
"""

import contextlib
import json
import logging
import math
from datetime import timedelta

from celery import current_app, shared_task
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from inventory.collection import agent_queue, collection_plan, hosts_with_plans
from inventory.demo_history import backfill
from inventory.models import Host, PlanDelivery
from inventory.reports.board import refresh_summaries
from inventory.timeseries import packing, partitions, rollups, running_blocks
from inventory.wire import signing

log = logging.getLogger(__name__)


@shared_task(
    name="inventory.send_collection_plans", time_limit=300, soft_time_limit=290, ignore_result=True
)
def send_collection_plans() -> dict:
    """One beat pass: every collected host whose plan changed gets it, and the longest
    unrefreshed hosts get theirs again, a share per pass that refreshes each host once every
    COLLECTION_PLAN_REFRESH_S (a plan lost on the broker is repaired that way). A fleet that
    does not change costs a few messages a pass, not one a host."""
    now = timezone.now()
    hosts = list(hosts_with_plans().select_related("plan_delivery"))
    share = math.ceil(
        len(hosts) * settings.COLLECTION_PLAN_INTERVAL_S / settings.COLLECTION_PLAN_REFRESH_S
    )
    refresh_before = now - timedelta(seconds=settings.COLLECTION_PLAN_REFRESH_S)
    changed, due = [], []
    for host in hosts:
        plan = collection_plan(host)
        delivery = getattr(host, "plan_delivery", None)
        if delivery is None or delivery.digest != plan["digest"]:
            changed.append((host, plan))
        elif delivery.sent_at <= refresh_before:
            due.append((host, plan))
    due.sort(key=lambda pair: pair[0].plan_delivery.sent_at)
    pairs = [("changed", pair) for pair in changed] + [("refreshed", pair) for pair in due[:share]]
    sent = {"changed": 0, "refreshed": 0, "held": 0}
    if not pairs:
        return sent  # the usual pass: nothing changed, no broker connection
    # Whether each queue held a message before this pass sent anything: the simulated hosts
    # share one, and a plan this pass sent to it is not an agent away.
    held = _waiting_counts({agent_queue(host) for _, (host, _) in pairs})
    delivered, kept_waiting = [], []
    # One producer for the pass, and the deliveries noted in two statements at its end: a
    # first pass over 10,000 hosts was a broker connection and an upsert a host (256 s).
    with current_app.producer_or_acquire() as producer:
        for kind, (host, plan) in pairs:
            if held[agent_queue(host)]:
                # The agent is away: another plan would only pile up behind the one that
                # waits. The host goes to the back of the refresh line; a changed plan (its
                # digest not noted) is tried again next pass.
                log.info("%s: its agent has not taken its last message; no new plan", host.name)
                kept_waiting.append(PlanDelivery(host=host, digest="", sent_at=now))
                sent["held"] += 1
                continue
            _publish_plan(host, plan, producer)
            delivered.append(PlanDelivery(host=host, digest=plan["digest"], sent_at=now))
            sent[kind] += 1
    _note_deliveries(delivered, ["digest", "sent_at"])
    # A held host keeps the digest it had (none when it never had a plan).
    _note_deliveries(kept_waiting, ["sent_at"])
    return sent


def _note_deliveries(deliveries: list[PlanDelivery], fields: list[str]) -> None:
    PlanDelivery.objects.bulk_create(
        deliveries, update_conflicts=True, unique_fields=["host"], update_fields=fields
    )


def _publish_plan(host: Host, plan: dict, producer=None) -> None:
    # A plan older than two flush intervals is stale: dropped rather than applied late, by
    # the agent (Celery's expires) and on RabbitMQ by the broker too (Celery sets it as the
    # message's expiration, a per-message TTL).
    current_app.send_task(
        "agent.apply_plan",
        args=[plan],
        queue=agent_queue(host),
        expires=_plan_expiry(plan),
        producer=producer,
    )


def _plan_expiry(plan: dict) -> float:
    return 2 * plan["flush_interval_s"] + 60


@shared_task(name="inventory.plan_requested", time_limit=30, soft_time_limit=25, ignore_result=True)
def plan_requested(body: str, signature: str | None) -> str:
    """An agent asks for its host's plan, naming the digest of the plan it keeps (or none):
    it gets the plan if that differs, or word that its plan still holds. Only a request
    signed with that host's secret is answered (inventory.wire.signing), as for batches."""
    try:
        request = json.loads(body)
        name, digest = str(request["host"]), request.get("digest")
    except (ValueError, TypeError, KeyError):
        log.warning("a plan request that is not one: %.200r", body)
        return "malformed"
    host = Host.objects.filter(name=name).first()
    if host is None or host.collector == Host.Collector.NONE or host.status == Host.Status.RETIRED:
        return "not collected"
    if not host.holds_secret or not signing.verify(host.agent_secret, body.encode(), signature):
        log.warning("%s: a plan request not signed with its secret; not answered", name)
        return "bad signature"
    plan = collection_plan(host)
    now = timezone.now()
    if digest != plan["digest"]:
        # The agent just asked: it is there, whatever waits on its queue (a shared one, or
        # the answer to another of its hosts' requests).
        _publish_plan(host, plan)
        _note_deliveries([PlanDelivery(host=host, digest=plan["digest"], sent_at=now)],
                         ["digest", "sent_at"])  # fmt: skip
        return "plan"
    # What the agent holds is current: a small message renews it.
    current_app.send_task(
        "agent.plan_still_valid",
        args=[host.name, plan["digest"]],
        queue=agent_queue(host),
        expires=_plan_expiry(plan),
    )
    PlanDelivery.objects.update_or_create(
        host=host, defaults={"digest": plan["digest"], "sent_at": now}
    )
    return "still valid"


def _waiting_counts(queues: set[str]) -> dict[str, int]:
    """How many messages wait on each queue that no consumer has taken; 0 for a queue not
    there (Redis keeps no empty queue). One connection for them all."""
    counts = {}
    with current_app.connection_for_write() as connection:
        channel = connection.channel()
        try:
            for queue in sorted(queues):
                try:
                    counts[queue] = channel.queue_declare(queue=queue, passive=True).message_count
                except connection.channel_errors:
                    counts[queue] = 0
                    # A refused passive declare closes the channel on AMQP.
                    with contextlib.suppress(*connection.channel_errors):
                        channel.close()
                    channel = connection.channel()
        finally:
            with contextlib.suppress(*connection.channel_errors, *connection.connection_errors):
                channel.close()
    return counts


@shared_task(name="inventory.refresh_rollups", time_limit=240, soft_time_limit=230)
def refresh_rollups() -> int:
    """Fold the minutes ingest marked dirty into the rollups (idempotent; safe in parallel)."""

    return rollups.refresh()


# A pass packs for this long and leaves the rest to the next (beat runs it every minute).
PACK_BUDGET_S = 50.0


@shared_task(name="inventory.pack_samples", time_limit=120, soft_time_limit=110)
def pack_samples() -> int:
    """Pack the closed hours of samples and minute rollups that are due, for at most
    PACK_BUDGET_S (idempotent; the next run goes on where this one stopped)."""

    return len(packing.pack(budget_s=PACK_BUDGET_S))


@shared_task(name="inventory.build_running_blocks", time_limit=120, soft_time_limit=110)
def build_running_blocks() -> int:
    """Build the blocks of counted running-request peaks that a week's P95 reads, for at most
    PACK_BUDGET_S (idempotent; a pass already running makes this one return at once)."""

    return running_blocks.build(budget_s=PACK_BUDGET_S)


@shared_task(name="inventory.refresh_host_summaries", time_limit=120, soft_time_limit=110)
def refresh_host_summaries() -> int:
    """Recompute every host's fleet board figures into its summary (idempotent; safe in
    parallel: a summary is never replaced by an older one). A board whose summaries are late
    computes its figures live, so a missed or slow run costs time, never a wrong row."""

    return refresh_summaries()


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
