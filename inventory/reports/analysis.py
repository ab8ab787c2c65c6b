"""The host page's analyses: KV advice per deployment, co-peaks per card, interference,
MPS blast radius, and the OOM timeline. Each reads history and hands it to the pure
analytics in inventory.analytics."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
from django.conf import settings
from django.db.models import Prefetch
from django.utils import timezone

from inventory.analytics.copeak import (
    CoPeakReport,
    analyse_aligned_copeak,
    longest_shared_tenancy,
)
from inventory.analytics.interference import InterferenceReport, interference_by_deployment
from inventory.analytics.kv_advisor import (
    AdmissionPolicy,
    KvAdvice,
    advise_kv_reservation_from_peaks,
)
from inventory.analytics.stats import sorted_array_percentile
from inventory.models import Deployment, Event, Gpu, Host
from inventory.timeseries import queries

KV_WINDOW = dt.timedelta(days=7)
COPEAK_WINDOW = dt.timedelta(days=7)
INTERFERENCE_WINDOW = dt.timedelta(days=2)
# A co-tenant is busy above half its own P95 concurrency: "its share of the daily peak".
BUSY_SHARE_OF_P95 = 0.5

_POLICIES = {
    Deployment.Admission.QUEUE: AdmissionPolicy.QUEUE,
    Deployment.Admission.SHED_LOW_PRIORITY: AdmissionPolicy.SHED_LOW_PRIORITY,
    Deployment.Admission.SHRINK_LOW_PRIORITY_KV: AdmissionPolicy.SHRINK_LOW_PRIORITY_KV,
    Deployment.Admission.EVICT_LOW_PRIORITY: AdmissionPolicy.EVICT_LOW_PRIORITY,
    Deployment.Admission.REFUSE: AdmissionPolicy.REFUSE,
}


def _active(host: Host):
    # A card names itself by its host: fetch the host with it, not once a card.
    return (
        host.deployments.exclude(status=Deployment.Status.STOPPED)
        .select_related("served_model")
        .prefetch_related(Prefetch("gpus", queryset=Gpu.objects.select_related("host")))
    )


def active_deployments(host: Host) -> list[Deployment]:
    """What `kv_advice` and `interference` read first: a page that shows both reads it once."""
    return list(_active(host))


@dataclass(frozen=True)
class KvRow:
    deployment: Deployment
    advice: KvAdvice | None
    reason: str  # why there is no advice


def kv_advice(
    host: Host, now: dt.datetime | None = None, deployments: list[Deployment] | None = None
) -> list[KvRow]:
    now = now or timezone.now()
    deployments = active_deployments(host) if deployments is None else deployments
    # The advice needs only the peaks, all inside the window: one array a deployment.
    peaks = queries.running_peaks([d.pk for d in deployments], now - KV_WINDOW, now)
    rows = []
    for deployment in deployments:
        per_token = deployment.served_model.effective_kv_bytes_per_token
        running = peaks.get(deployment.pk)
        if running is None:
            rows.append(KvRow(deployment, None, "no engine history in the last 7 days"))
            continue
        if not deployment.kv_tokens_per_request or not per_token:
            rows.append(KvRow(deployment, None, "tokens per request or KV bytes per token unknown"))
            continue
        rows.append(
            KvRow(
                deployment,
                advise_kv_reservation_from_peaks(
                    deployment.served_model.name,
                    running,
                    current_reservation_bytes=deployment.kv_reservation_bytes,
                    bytes_per_token=per_token,
                    tokens_per_request=deployment.kv_tokens_per_request,
                    buffer=settings.KV_BUFFER,
                    admission_policy=_POLICIES.get(deployment.admission_policy),
                    window_s=KV_WINDOW.total_seconds(),
                    shape=deployment.served_model.kv_shape(),
                    tensor_parallel=deployment.tensor_parallel,
                    pipeline_parallel=max(1, deployment.pipeline_parallel),
                ),
                "",
            )
        )
    return rows


def copeaks(host: Host, now: dt.datetime | None = None) -> list[CoPeakReport]:
    """Per card with two or more tenants: do their memory peaks come at the same moments?"""
    now = now or timezone.now()
    # Only cards that ever had two tenants can have co-peaked (stopped deployments included).
    tenants: dict[int, set[int]] = {}
    for gpu_id, deployment_id in Deployment.gpus.through.objects.filter(gpu__host=host).values_list(
        "gpu_id", "deployment_id"
    ):
        tenants.setdefault(gpu_id, set()).add(deployment_id)
    gpus = {
        gpu.pk: gpu
        for gpu in host.gpus.filter(pk__in=[g for g, d in tenants.items() if len(d) > 1])
    }
    if not gpus:
        return []
    demand: dict[int, dict[int, tuple]] = {}
    for gpu_id, deployment_id, at, used_max in queries.deployment_memory_minutes(
        list(gpus), now - COPEAK_WINDOW
    ):
        demand.setdefault(gpu_id, {})[deployment_id] = (at, used_max)
    names = dict(Deployment.objects.filter(host=host).values_list("pk", "served_model__name"))
    reports = []
    for gpu_id, per_deployment in sorted(demand.items(), key=lambda item: gpus[item[0]].index):
        shared = longest_shared_tenancy(
            {
                f"{names.get(deployment_id, deployment_id)} #{deployment_id}": series
                for deployment_id, series in per_deployment.items()
            }
        )
        if shared:
            reports.append(
                analyse_aligned_copeak(
                    str(gpus[gpu_id]), shared, capacity_bytes=gpus[gpu_id].memory_total_bytes
                )
            )
    return reports


def interference(
    host: Host, now: dt.datetime | None = None, deployments: list[Deployment] | None = None
) -> list[InterferenceReport]:
    now = now or timezone.now()
    deployments = active_deployments(host) if deployments is None else deployments
    label = {d.pk: f"{d.served_model.name} #{d.pk}" for d in deployments}
    placement: dict[str, list[Deployment]] = {}
    for deployment in deployments:
        if deployment.mig_slice_id:  # a MIG instance shares no SMs with anyone
            continue
        for gpu in deployment.gpus.all():
            placement.setdefault(str(gpu), []).append(deployment)
    # Only a deployment that shares a card has co-tenants to compare with, and only its own
    # minutes set its load: nobody else's history can change a report.
    sharing = sorted({d.pk for on_card in placement.values() if len(on_card) > 1 for d in on_card})
    history = queries.load_and_latency(sharing, now - INTERFERENCE_WINDOW, now)
    latencies, load = {}, {}
    for deployment in deployments:
        if deployment.pk not in history:
            continue
        at, running, latency = history[deployment.pk]  # NaN: the minute has no figure
        measured = ~np.isnan(running)
        if not measured.any():
            continue
        typical = sorted_array_percentile(np.sort(running[measured]), 95) or 1.0
        load[label[deployment.pk]] = np.column_stack((at, np.where(measured, running, 0) / typical))
        timed = ~np.isnan(latency)
        latencies[label[deployment.pk]] = np.column_stack((at[timed], latency[timed]))
    return list(
        interference_by_deployment(
            latencies,
            load,
            {card: [label[d.pk] for d in on_card] for card, on_card in placement.items()},
            busy_threshold=BUSY_SHARE_OF_P95,
            max_age_s=120.0,
        )
    )


@dataclass(frozen=True)
class MpsGroup:
    card: str  # every card the server spans, joined
    models: list[str]  # every client dies with the server: the blast radius
    thread_percentages: dict[str, int | None]
    last_crash: Event | None
    live: bool = False  # from the MPS control daemon's answer, not the declared isolation
    server_pid: int | None = None
    refusing_clients: bool = False  # the server's status is FAULT: it takes no new client
    pipe_dir: str = ""  # which control daemon: one per GPU where the runbooks set MPS up


# A live state older than this is no longer what runs on the host: fall back to the plan.
MPS_LIVE_FOR = dt.timedelta(minutes=10)


def mps_groups(host: Host) -> list[MpsGroup]:
    """Who dies together: each MPS server the host's agent saw (its cards, its clients), else
    the deployments declared MPS, grouped per card."""
    crashes = {
        event.gpu_id: event
        for event in Event.objects.filter(host=host, kind=Event.Kind.MPS_SERVER_DOWN).order_by("at")
    }
    live = _live_mps_groups(host, crashes)
    covered = {model for group in live for model in group.models}
    groups: dict[str, list[Deployment]] = {}
    cards = {}
    for deployment in _active(host).filter(isolation_mode=Deployment.Isolation.MPS):
        if deployment.served_model.name in covered:
            continue
        for gpu in deployment.gpus.all():
            groups.setdefault(str(gpu), []).append(deployment)
            cards[str(gpu)] = gpu
    return live + [
        MpsGroup(
            card,
            [d.served_model.name for d in members],
            {d.served_model.name: d.mps_active_thread_percentage for d in members},
            crashes.get(cards[card].pk),
        )
        for card, members in sorted(groups.items())
    ]


def _live_mps_groups(host: Host, crashes: dict) -> list[MpsGroup]:
    status = getattr(host, "collector_status", None)
    if status is None or status.mps_seen_at is None:
        return []
    if timezone.now() - status.mps_seen_at > MPS_LIVE_FOR:
        return []
    gpus = {gpu.uuid: gpu for gpu in host.gpus.all()}
    deployments = {str(d.pk): d for d in _active(host)}
    groups = []
    for server in status.mps_servers or []:
        on = [gpus[uuid] for uuid in server.get("card_uuids") or [] if uuid in gpus]
        clients = [
            deployments[str(client.get("deployment_id"))]
            for client in server.get("clients") or []
            if str(client.get("deployment_id")) in deployments
        ]
        if not on or not server.get("clients"):
            continue
        last = [crashes[gpu.pk] for gpu in on if gpu.pk in crashes]
        groups.append(
            MpsGroup(
                " + ".join(str(gpu) for gpu in on),
                [d.served_model.name for d in clients]
                + ["unmapped client"] * (len(server["clients"]) - len(clients)),
                {d.served_model.name: d.mps_active_thread_percentage for d in clients},
                max(last, key=lambda event: event.at) if last else None,
                live=True,
                server_pid=server.get("server_pid"),
                refusing_clients=server.get("status") == "FAULT",
                pipe_dir=str(server.get("pipe_dir") or ""),
            )
        )
    return groups


def oom_timeline(host: Host, days: int = 30) -> list[Event]:
    return list(
        Event.objects.filter(
            host=host, kind=Event.Kind.OOM, at__gte=timezone.now() - dt.timedelta(days=days)
        )
        .select_related("gpu", "deployment__served_model")
        .order_by("-at")[:200]
    )
