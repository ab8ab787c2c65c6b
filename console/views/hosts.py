from django.db.models import Prefetch
from django.shortcuts import render
from django.utils import timezone

from console.access import get_visible_or_404
from console.models import AuditEntry
from console.placement import diagram
from inventory.api.views import collector_health
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
    return render(
        request,
        "console/host_detail.html",
        {
            "host": host,
            "gpus": gpus,
            "deployments": deployments,
            "notes": notes,
            "changes": changes,
            "isolation_modes": sorted(isolation_modes),
            "collector": collector_health(status, timezone.now()),
            "events": events,
            "faults": faults,
            "can_acknowledge": request.user.has_perm("inventory.acknowledge_event"),
            "placement": diagram.draw(diagram.build(*current_placement(host))),
        },
    )
