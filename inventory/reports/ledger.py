"""Each card's memory ledger, now or at a past moment, from what the database holds.

The newest card sample at or before the moment (raw samples, within a few intervals) gives
NVML's card figures; the process samples of the same batch give per-process memory and
allocator statistics; the deployment's spec fills in weights, KV reservation and the rest as
estimates; the engine's KV usage splits the reservation into used and reserved-unused.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import connection
from django.utils import timezone

from inventory.analytics.fragmentation import CardStatus, card_status
from inventory.analytics.ledger import CardLedger, build_ledger
from inventory.analytics.snapshot import (
    AllocatorStats,
    Basis,
    CardSnapshot,
    DeploymentSpec,
    EngineKvCache,
    ProcessSnapshot,
)
from inventory.models import Deployment, Gpu, Host
from inventory.reports.thresholds import fragmentation_thresholds, usage_thresholds

# A sample older than this (before the moment asked for) says nothing about that moment...
FRESHNESS = dt.timedelta(minutes=10)
# ...but "now" shows the newest there is, stale or not: the page says when it was sampled.
NEWEST = dt.timedelta(days=1)


@dataclass(frozen=True)
class CardView:
    gpu: Gpu
    at: dt.datetime | None  # when the figures were sampled; None: no telemetry
    ledger: CardLedger
    status: CardStatus


def _rows(sql: str, params: list) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _allocator(row: dict) -> AllocatorStats | None:
    reserved, allocated = row["alloc_reserved_last"], row["alloc_allocated_last"]
    if reserved is None or allocated is None or allocated > reserved:
        return None
    pool_free = reserved - allocated
    inactive = row["alloc_inactive_split_last"]
    largest = row["alloc_largest_free_last"]
    return AllocatorStats(
        reserved,
        allocated,
        inactive if inactive is None or inactive <= pool_free else pool_free,
        largest if largest is None or largest <= pool_free else pool_free,
    )


def card_views(host: Host, at: dt.datetime | None = None) -> list[CardView]:
    freshness = FRESHNESS if at else NEWEST
    at = at or timezone.now()
    gpus = list(host.gpus.order_by("index"))
    ids = [gpu.pk for gpu in gpus]
    cards = {
        row["gpu_id"]: row
        for row in _rows(
            """
            SELECT DISTINCT ON (gpu_id) gpu_id, ts, batch_id, total_bytes, used_last,
                   reserved_last, free_last
            FROM inventory_card_sample
            WHERE gpu_id = ANY(%s) AND ts <= %s AND ts > %s
            ORDER BY gpu_id, ts DESC
            """,
            [ids, at, at - freshness],
        )
    }
    processes: dict[int, list[dict]] = {}
    batches = list({row["batch_id"] for row in cards.values()})
    if batches:
        for row in _rows(
            """
            SELECT gpu_id, pid, deployment_id, used_last, alloc_reserved_last,
                   alloc_allocated_last, alloc_inactive_split_last, alloc_largest_free_last
            FROM inventory_process_sample
            WHERE gpu_id = ANY(%s) AND batch_id = ANY(%s) AND ts > %s AND ts <= %s
            """,
            [ids, batches, at - freshness, at],
        ):
            processes.setdefault(row["gpu_id"], []).append(row)
    deployments = {
        d.pk: d
        for d in Deployment.objects.filter(host=host)
        .select_related("served_model")
        .prefetch_related("gpus")
    }
    kv_usage = _kv_usage(list(deployments), at, freshness)
    views = []
    for gpu in gpus:
        card = cards.get(gpu.pk)
        snapshot = CardSnapshot(
            card_id=str(gpu),
            at=(card["ts"] if card else at).timestamp(),
            total_bytes=(card and card["total_bytes"]) or gpu.memory_total_bytes,
            driver_reserved_bytes=card["reserved_last"] if card else None,
            used_bytes=card["used_last"] if card else None,
            # nvidia-smi rounds each figure on its own; never let that make free negative.
            free_bytes=max(0, card["free_last"])
            if card and card["free_last"] is not None
            else None,
            processes=tuple(
                _process(row, deployments.get(row["deployment_id"]), kv_usage)
                for row in processes.get(gpu.pk, [])
            )
            # Nothing measured: the card's deployments as their own figures say (estimates).
            or tuple(
                _process(_UNMEASURED, deployment, kv_usage)
                for deployment in deployments.values()
                if deployment.status != Deployment.Status.STOPPED and gpu in deployment.gpus.all()
            ),
        )
        status = card_status(
            snapshot,
            usage_thresholds=usage_thresholds(),
            fragmentation_thresholds=fragmentation_thresholds(),
        )
        views.append(CardView(gpu, card["ts"] if card else None, build_ledger(snapshot), status))
    return views


_UNMEASURED = {
    "pid": None,
    "used_last": None,
    "alloc_reserved_last": None,
    "alloc_allocated_last": None,
    "alloc_inactive_split_last": None,
    "alloc_largest_free_last": None,
}


def _kv_usage(deployment_ids: list[int], at: dt.datetime, freshness) -> dict[int, float]:
    return {
        row["deployment_id"]: row["kv_usage_last"]
        for row in _rows(
            """
            SELECT DISTINCT ON (deployment_id) deployment_id, kv_usage_last
            FROM inventory_engine_sample
            WHERE deployment_id = ANY(%s) AND ts <= %s AND ts > %s
              AND kv_usage_last IS NOT NULL
            ORDER BY deployment_id, ts DESC
            """,
            [deployment_ids, at, at - freshness],
        )
    }


def _process(row: dict, deployment: Deployment | None, kv_usage: dict) -> ProcessSnapshot:
    spec = kv = None
    if deployment is not None:
        cards = max(1, len(deployment.gpus.all()))
        reservation = deployment.kv_reservation_bytes // cards
        spec = DeploymentSpec(
            weights_bytes=deployment.served_model.weights_bytes // cards,
            kv_reservation_bytes=reservation,
        )
        if reservation:
            kv = EngineKvCache(
                pool_bytes=reservation,
                usage_fraction=min(1.0, max(0.0, kv_usage.get(deployment.pk) or 0.0))
                if deployment.pk in kv_usage
                else None,
                pool_basis=Basis.ESTIMATED,
                pool_source="deployment KV reservation",
            )
    return ProcessSnapshot(
        pid=row["pid"],
        deployment=deployment.served_model.name if deployment else None,
        used_bytes=row["used_last"],
        allocator=_allocator(row),
        kv_cache=kv,
        spec=spec,
    )
