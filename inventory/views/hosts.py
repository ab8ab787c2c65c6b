from django.db.models import Prefetch
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone

from console.core.access import get_visible_or_404
from console.core.models import AuditEntry
from console.core.reason_text import render_here
from console.placement import diagram
from inventory.models import (
    CollectorFault,
    CollectorStatus,
    Deployment,
    Event,
    Gpu,
    Host,
    MigSlice,
)
from inventory.placement_state import current_placement
from inventory.reports import analysis
from inventory.reports.collector import collector_health
from inventory.reports.ledger import card_views, mig_instance_views
from inventory.reports.ledger_json import ledger_json
from inventory.reports.mig import gpu_instances, mig_catalogued
from inventory.reports.series import WINDOWS
from inventory.reports.series import host_charts as host_charts_data
from runbooks.models import RunbookNote


def host_detail(request, name: str):
    host = get_visible_or_404(request.user, Host.objects, name=name)
    gpus = host.gpus.prefetch_related(
        Prefetch("mig_slices", queryset=MigSlice.objects.order_by("start_slot"))
    )
    deployments = (
        host.deployments.select_related("served_model", "mig_slice__gpu")
        .prefetch_related("gpus")
        .order_by("served_model__priority", "served_model__name")
    )
    stopped = [d for d in deployments if d.status == Deployment.Status.STOPPED]
    deployments = [d for d in deployments if d.status != Deployment.Status.STOPPED]
    isolation_modes = host.isolation_modes()
    if any(gpu.mig_mode == Gpu.MigMode.ENABLED for gpu in gpus):
        isolation_modes.add(Deployment.Isolation.MIG)
    notes = RunbookNote.objects.visible_to(request.user).for_host(host, isolation_modes)
    changes = AuditEntry.objects.visible_to(request.user).filter(host=host)[:20]
    status = CollectorStatus.objects.filter(host=host).first()
    events = (
        Event.objects.visible_to(request.user)
        .filter(host=host)
        .select_related("gpu", "deployment__served_model", "acknowledged_by")[:20]
    )
    faults = CollectorFault.objects.visible_to(request.user).filter(host=host)[:10]
    ledgers = card_views(host)
    mig_ledgers = mig_instance_views(host)
    mig_ledger_gpus = {view.gpu.pk for view in mig_ledgers}
    ooms = analysis.oom_timeline(host)
    return render(
        request,
        "inventory/host_detail.html",
        {
            "host": host,
            "gpus": gpus,
            "deployments": deployments,
            "stopped": stopped,
            "notes": notes,
            "changes": changes,
            "isolation_modes": sorted(isolation_modes),
            "collector": collector_health(status, timezone.now()),
            "events": events,
            "faults": faults,
            "can_acknowledge": request.user.has_perm("inventory.acknowledge_event"),
            "placement": diagram.to_drawing(diagram.build(*current_placement(host))),
            # A MIG card's ledger is drawn per GPU instance: its memory, counted once.
            "ledger_data": ledger_json(
                [view for view in ledgers if view.gpu.pk not in mig_ledger_gpus] + mig_ledgers
            ),
            "card_status": {view.gpu.pk: view.status for view in ledgers},
            "card_headroom": {view.gpu.pk: view.headroom_bytes for view in ledgers},
            "gpu_instances": {gpu.pk: gpu_instances(list(gpu.mig_slices.all())) for gpu in gpus},
            "mig_uncatalogued": {
                gpu.pk
                for gpu in gpus
                if gpu.mig_mode == Gpu.MigMode.ENABLED and not mig_catalogued(gpu)
            },
            "kv_pools": [
                (view.label or view.gpu, name, pool)
                for view in ledgers + mig_ledgers
                for name, pool in view.kv_pools
            ],
            "mps_groups": analysis.mps_groups(host),
            "ooms": ooms,
            "oom_points": [
                {
                    "at": event.at.isoformat(),
                    "card": event.gpu.index if event.gpu else None,
                    "cause": event.cause,
                    "label": event.get_cause_display(),
                    "text": render_here(event.cause_reason) or event.cause_explanation,
                }
                for event in ooms
            ],
            "windows": list(WINDOWS),
        },
    )


def host_charts(request, name: str):
    """Heatmaps and per-deployment memory lines for one window, as JSON for the page."""
    host = get_visible_or_404(request.user, Host.objects, name=name)
    window = request.GET.get("window", "24h")
    if window not in WINDOWS:
        return JsonResponse({"window": f"one of {', '.join(WINDOWS)}, got {window!r}"}, status=400)
    return JsonResponse(host_charts_data(host, window))


def host_analysis(request, name: str):
    """KV advice, co-peaks and interference: slower to compute, loaded after the page."""
    host = get_visible_or_404(request.user, Host.objects, name=name)
    now = timezone.now()
    deployments = analysis.active_deployments(host)
    return render(
        request,
        "inventory/host_analysis.html",
        {
            "host": host,
            "kv_rows": analysis.kv_advice(host, now, deployments),
            "copeaks": analysis.copeaks(host, now),
            "interference": analysis.interference(host, now, deployments),
        },
    )
