import datetime as dt

from django.contrib.auth.decorators import permission_required
from django.db.models import Count, Q
from django.shortcuts import render
from django.utils import timezone

from console.core.access import get_visible_or_404
from inventory.models import Deployment, Host, ServedModel
from inventory.reports.latency import model_latency_lines

# The model page's latency history: a month, hourly, long enough to see a change's effect.
LATENCY_WINDOW = dt.timedelta(days=30)
LATENCY_STEP_S = 3600


@permission_required("inventory.view_servedmodel", raise_exception=True)
def model_list(request):
    models = ServedModel.objects.visible_to(request.user).annotate(
        active_deployments=Count(
            "deployments", filter=~Q(deployments__status=Deployment.Status.STOPPED)
        )
    )
    return render(request, "inventory/model_list.html", {"models": models})


def model_detail(request, pk: int):
    model = get_visible_or_404(request.user, ServedModel.objects, pk=pk)
    deployments = model.deployments.select_related("host", "mig_slice__gpu").prefetch_related(
        "gpus"
    )
    notes = model.runbook_notes.visible_to(request.user)
    now = timezone.now()
    latency = model_latency_lines(
        model,
        list(Host.objects.visible_to(request.user)),
        now - LATENCY_WINDOW,
        now,
        LATENCY_STEP_S,
    )
    return render(
        request,
        "inventory/model_detail.html",
        {
            "model": model,
            "deployments": deployments,
            "notes": notes,
            "latency": latency,
            "time_zone": timezone.get_current_timezone_name(),
        },
    )
