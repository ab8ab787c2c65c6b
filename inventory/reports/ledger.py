"""Each card's memory ledger, now or at a past moment, from what the database holds.

The newest card sample at or before the moment (raw samples, within a few intervals) gives
NVML's card figures; the process samples of the same batch give per-process memory and
allocator statistics; the deployment's spec fills in weights, KV reservation and the rest as
estimates; the engine's KV usage splits the reservation into used and reserved-unused. Beside
the ledger, each card's headroom over the two hours before the moment (reports.headroom).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.utils import timezone

from inventory.analytics.context import cuda_context_estimate
from inventory.analytics.fragmentation import CardStatus, card_status
from inventory.analytics.ledger import CardLedger, build_ledger
from inventory.analytics.snapshot import (
    Basis,
    CardSnapshot,
    DeploymentSpec,
    EngineKvCache,
    ProcessSnapshot,
    read_allocator_stats,
)
from inventory.models import Deployment, Gpu, Host
from inventory.reports.headroom import recent_card_headroom
from inventory.reports.thresholds import fragmentation_thresholds, usage_thresholds
from inventory.timeseries import queries

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
    headroom_bytes: int | None  # over the two hours before the moment; None: not measured


def card_views(host: Host, at: dt.datetime | None = None) -> list[CardView]:
    freshness = FRESHNESS if at else NEWEST
    at = at or timezone.now()
    gpus = list(host.gpus.order_by("index"))
    ids = [gpu.pk for gpu in gpus]
    cards = queries.card_samples_at(ids, at, freshness)
    processes: dict[int, list[dict]] = {}
    batches = list({row["batch_id"] for row in cards.values()})
    for row in queries.process_samples_of_batches(ids, batches, at - freshness, at):
        processes.setdefault(row["gpu_id"], []).append(row)
    deployments = {
        d.pk: d
        for d in Deployment.objects.filter(host=host)
        .select_related("served_model")
        .prefetch_related("gpus")
    }
    kv_usage = queries.kv_usage_at(list(deployments), at, freshness)
    headroom = {
        card.peaks.gpu_id: card.headroom_bytes for card in recent_card_headroom([host.pk], at)
    }
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
                _process(row, deployments.get(row["deployment_id"]), kv_usage, gpu)
                for row in processes.get(gpu.pk, [])
            )
            # Nothing measured: the card's deployments as their own figures say (estimates).
            or tuple(
                _process(_UNMEASURED, deployment, kv_usage, gpu)
                for deployment in deployments.values()
                if deployment.status != Deployment.Status.STOPPED and gpu in deployment.gpus.all()
            ),
        )
        status = card_status(
            snapshot,
            usage_thresholds=usage_thresholds(),
            fragmentation_thresholds=fragmentation_thresholds(),
        )
        views.append(
            CardView(
                gpu,
                card["ts"] if card else None,
                build_ledger(snapshot),
                status,
                headroom.get(gpu.pk),
            )
        )
    return views


_UNMEASURED = {
    "pid": None,
    "used_last": None,
    "alloc_reserved_last": None,
    "alloc_allocated_last": None,
    "alloc_inactive_split_last": None,
    "alloc_largest_free_last": None,
}


def _process(row: dict, deployment: Deployment | None, kv_usage: dict, gpu: Gpu) -> ProcessSnapshot:
    spec = kv = None
    if deployment is not None:
        cards = max(1, len(deployment.gpus.all()))
        card_kv = deployment.kv_per_card()
        reservation = card_kv.bytes
        spec = DeploymentSpec(
            weights_bytes=deployment.served_model.weights_bytes // cards,
            kv_reservation_bytes=reservation,
            cuda_context_bytes=cuda_context_estimate(gpu.product_name).bytes,
        )
        if reservation:
            kv = EngineKvCache(
                pool_bytes=reservation,
                usage_fraction=min(1.0, max(0.0, kv_usage.get(deployment.pk) or 0.0))
                if deployment.pk in kv_usage
                else None,
                pool_basis=Basis.ESTIMATED,
                pool_source="deployment KV reservation, per card from the model's shape"
                if card_kv.how == "shape"
                else "deployment KV reservation split evenly (model shape unknown)",
            )
    return ProcessSnapshot(
        pid=row["pid"],
        deployment=deployment.served_model.name if deployment else None,
        used_bytes=row["used_last"],
        allocator=read_allocator_stats(
            row["alloc_reserved_last"],
            row["alloc_allocated_last"],
            row["alloc_inactive_split_last"],
            row["alloc_largest_free_last"],
        ),
        kv_cache=kv,
        spec=spec,
    )
