from django.contrib.auth.decorators import permission_required
from django.db.models import Count, IntegerField, OuterRef, Q, Subquery
from django.shortcuts import render

from inventory.models import Deployment, Gpu, Host


def _per_host(queryset, aggregate):
    """A correlated subquery, so that aggregates over cards and deployments do not multiply."""
    return Subquery(
        queryset.filter(host=OuterRef("pk"))
        .order_by()
        .values("host")
        .annotate(value=aggregate)
        .values("value"),
        output_field=IntegerField(),
    )


@permission_required("inventory.view_host", raise_exception=True)
def fleet(request):
    hosts = (
        Host.objects.visible_to(request.user)
        .prefetch_related("gpus")
        .annotate(
            card_count=_per_host(Gpu.objects, Count("pk")),
            deployment_count=_per_host(
                Deployment.objects.exclude(status=Deployment.Status.STOPPED), Count("pk")
            ),
        )
    )
    status = request.GET.get("status", "")
    if status in Host.Status.values:
        hosts = hosts.filter(status=status)
    query = request.GET.get("q", "").strip()
    if query:
        hosts = hosts.filter(Q(name__icontains=query) | Q(address__icontains=query))
    return render(
        request,
        "console/fleet.html",
        {"hosts": hosts, "statuses": Host.Status.choices, "status": status, "q": query},
    )
