from django.contrib.auth.decorators import permission_required
from django.db.models import Count, Q
from django.shortcuts import render

from console.access import get_visible_or_404
from inventory.models import Deployment, ServedModel


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
    return render(
        request,
        "inventory/model_detail.html",
        {"model": model, "deployments": deployments, "notes": notes},
    )
