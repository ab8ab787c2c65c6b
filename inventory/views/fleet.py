from django.contrib.auth.decorators import permission_required
from django.shortcuts import render

from inventory.filters import FleetBoardFilter
from inventory.models import Host
from inventory.reports.fleet import fleet_rows, sorted_rows


@permission_required("inventory.view_host", raise_exception=True)
def fleet(request):
    board = FleetBoardFilter(
        request.GET,
        queryset=Host.objects.visible_to(request.user).select_related("collector_status"),
        request=request,
    )
    rows = fleet_rows(list(board.qs))
    if board.problems_only:
        rows = [row for row in rows if row.problems]
    context = {"rows": sorted_rows(rows, board.sort), "board": board, "form": board.form}
    # The board refreshes itself by fetching just its rows.
    template = "inventory/fleet_rows.html" if request.GET.get("partial") else "inventory/fleet.html"
    return render(request, template, context)
