"""Each card's memory ledger, now or at a past moment, from what the database holds.

The newest card sample at or before the moment (raw samples, within a few intervals) gives
NVML's card figures; the process samples of the same batch give per-process memory and
allocator statistics; the deployment's spec fills in weights, KV reservation and the rest as
estimates. The KV line is the engine's own pool where it reported one (vLLM cache_config_info),
split by its usage fraction into used and reserved-unused; otherwise the deployment's
reservation on the card, whole (the usage is a share of the engine's pool, not of the
reservation). Beside the ledger: each card's headroom over the two hours before the moment
(reports.headroom) and each deployment's KV pool, in use and reserved by policy, apart.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.utils import timezone

from inventory.analytics.context import cuda_context_estimate, nccl_buffer_estimate
from inventory.analytics.fragmentation import CardStatus, card_status
from inventory.analytics.kv import KvPool, engine_kv_pool
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
from inventory.reports.mig import gpu_instances
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
    kv_pools: tuple[tuple[str, KvPool], ...] = ()  # (deployment, its KV pool on this card)
    label: str = ""  # a MIG GPU instance's name; empty for a whole card


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
    engine_kv = queries.engine_kv_at(list(deployments), at, freshness)
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
                _process(row, deployments.get(row["deployment_id"]), engine_kv, gpu)
                for row in processes.get(gpu.pk, [])
            )
            # Nothing measured: the card's deployments as their own figures say (estimates).
            or tuple(
                _process(_UNMEASURED, deployment, engine_kv, gpu)
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
                tuple(
                    (deployment.served_model.name, kv_pool_on_card(deployment, engine_kv))
                    for deployment in deployments.values()
                    if deployment.status != Deployment.Status.STOPPED
                    and gpu in deployment.gpus.all()
                ),
            )
        )
    return views


_UNMEASURED = {
    "pid": None,
    "mig_slice_id": None,
    "used_last": None,
    "alloc_reserved_last": None,
    "alloc_allocated_last": None,
    "alloc_inactive_split_last": None,
    "alloc_largest_free_last": None,
}


def kv_pool_on_card(deployment: Deployment, engine_kv: dict) -> KvPool:
    """The deployment's KV on each of its cards: engine pool, in use, reserved by policy."""
    card_kv = deployment.kv_per_card()
    engine = engine_kv.get(deployment.pk) or {}
    usage = engine.get("usage")
    return engine_kv_pool(
        card_kv.bytes,
        bytes_per_token_per_card=card_kv.bytes_per_token,
        usage_fraction=None if usage is None else min(1.0, max(0.0, usage)),
        pool_tokens=engine.get("pool_tokens"),
        pool_bytes=engine.get("pool_bytes"),
        memory_fraction=engine.get("memory_fraction"),
    )


_POOL_SOURCES = {
    "engine_bytes": "engine cache_config kv_cache_memory_bytes",
    "engine_blocks": "engine cache_config num_gpu_blocks x block_size x bytes/token on this card",
}


def _process(
    row: dict, deployment: Deployment | None, engine_kv: dict, gpu: Gpu
) -> ProcessSnapshot:
    spec = kv = None
    if deployment is not None:
        cards = max(1, len(deployment.gpus.all()))
        pool = kv_pool_on_card(deployment, engine_kv)
        usage = (engine_kv.get(deployment.pk) or {}).get("usage")
        spec = DeploymentSpec(
            weights_bytes=deployment.served_model.weights_bytes // cards,
            kv_reservation_bytes=pool.reserved_by_policy_bytes,
            cuda_context_bytes=cuda_context_estimate(gpu.product_name).bytes,
            nccl_bytes=nccl_buffer_estimate(cards),
        )
        if pool.pool_bytes is not None:
            kv = EngineKvCache(
                pool_bytes=pool.pool_bytes,
                usage_fraction=None if usage is None else min(1.0, max(0.0, usage)),
                pool_basis=Basis.MEASURED,
                pool_source=_POOL_SOURCES[pool.pool_source],
            )
        elif pool.reserved_by_policy_bytes:
            # The engine's usage is a share of a pool it did not report: applied to the
            # reservation it would be a share of the wrong figure, so the KV is shown whole.
            kv = EngineKvCache(
                pool_bytes=pool.reserved_by_policy_bytes,
                usage_fraction=None,
                pool_basis=Basis.ESTIMATED,
                pool_source="deployment KV reservation, per card from the model's shape"
                if deployment.kv_per_card().how == "shape"
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


def mig_instance_views(host: Host, at: dt.datetime | None = None) -> list[CardView]:
    """A ledger per MIG GPU instance: its memory (shared by its compute instances, counted
    once), what NVML reports used in it, and the processes of all its compute instances."""
    freshness = FRESHNESS if at else NEWEST
    at = at or timezone.now()
    gpus = list(
        host.gpus.filter(mig_mode=Gpu.MigMode.ENABLED)
        .prefetch_related("mig_slices")
        .order_by("index")
    )
    if not gpus:
        return []
    ids = [gpu.pk for gpu in gpus]
    cards = queries.card_samples_at(ids, at, freshness)
    batches = list({row["batch_id"] for row in cards.values()})
    processes = queries.process_samples_of_batches(ids, batches, at - freshness, at)
    slices = [piece for gpu in gpus for piece in gpu.mig_slices.all()]
    mig = queries.mig_samples_of_batches([p.pk for p in slices], batches, at - freshness, at)
    deployments = {
        d.pk: d
        for d in Deployment.objects.filter(host=host, mig_slice__in=slices)
        .exclude(status=Deployment.Status.STOPPED)
        .select_related("served_model")
        .prefetch_related("gpus")
    }
    engine_kv = queries.engine_kv_at(list(deployments), at, freshness)
    views = []
    for gpu in gpus:
        card = cards.get(gpu.pk)
        for instance in gpu_instances(list(gpu.mig_slices.all())):
            members = {piece.pk for piece in instance.compute_instances}
            samples = [mig[pk] for pk in members if pk in mig]
            used = [row["used_last"] for row in samples if row["used_last"] is not None]
            total = max((row["total_bytes"] or 0 for row in samples), default=0)
            own = [d for d in deployments.values() if d.mig_slice_id in members]
            snapshot = CardSnapshot(
                card_id=f"{gpu} GI {instance.profile}@{instance.start_slot}",
                at=(card["ts"] if card else at).timestamp(),
                total_bytes=total or instance.memory_bytes,
                # An instance's memory is what NVML gives its processes: no driver reserve.
                driver_reserved_bytes=0,
                used_bytes=max(used) if used else None,
                free_bytes=None,
                processes=tuple(
                    _process(row, deployments.get(row["deployment_id"]), engine_kv, gpu)
                    for row in processes
                    if row["mig_slice_id"] in members
                )
                or tuple(_process(_UNMEASURED, d, engine_kv, gpu) for d in own),
            )
            views.append(
                CardView(
                    gpu,
                    card["ts"] if card else None,
                    build_ledger(snapshot),
                    card_status(
                        snapshot,
                        usage_thresholds=usage_thresholds(),
                        fragmentation_thresholds=fragmentation_thresholds(),
                    ),
                    None,
                    tuple((d.served_model.name, kv_pool_on_card(d, engine_kv)) for d in own),
                    label=snapshot.card_id,
                )
            )
    return views
