from django.contrib.auth.decorators import permission_required
from django.db.models import Q
from django.shortcuts import render

from inventory.models import Host
from inventory.reports.fleet import SORTS, fleet_rows, sorted_rows


@permission_required("inventory.view_host", raise_exception=True)
def fleet(request):
    hosts = Host.objects.visible_to(request.user).select_related("collector_status")
    status = request.GET.get("status", "")
    if status in Host.Status.values:
        hosts = hosts.filter(status=status)
    query = request.GET.get("q", "").strip()
    if query:
        hosts = hosts.filter(Q(name__icontains=query) | Q(address__icontains=query))
    rows = fleet_rows(list(hosts))
    problems = request.GET.get("problems") == "1"
    if problems:
        rows = [row for row in rows if row.problems]
    sort = request.GET.get("sort", "name")
    context = {
        "rows": sorted_rows(rows, sort),
        "sort": sort if sort in SORTS else "name",
        "sorts": list(SORTS),
        "statuses": Host.Status.choices,
        "status": status,
        "q": query,
        "problems": problems,
    }
    # The board refreshes itself by fetching just its rows.
    template = "inventory/fleet_rows.html" if request.GET.get("partial") else "inventory/fleet.html"
    return render(request, template, context)
