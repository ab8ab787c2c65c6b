"""The fleet board, its CSV, and the demo backfill's progress."""

from django.contrib.auth.decorators import permission_required
from django.http import JsonResponse
from django.shortcuts import render

from console.core.csv_export import csv_response
from console.core.pagination import page_of
from inventory.filters import FleetBoardFilter
from inventory.models import Host
from inventory.reports.backfill import BackfillProgress
from inventory.reports.board import board as fleet_board

# What a row shows of its host and collector: a thousand hosts' other columns (labels, the
# agent's MPS servers) would be read and converted on every refresh for nothing.
ROW_FIELDS = (
    "name", "status", "collector_status__last_sample_at", "collector_status__batches",
    "collector_status__missing_batches", "collector_status__faults_last_batch",
    "collector_status__outbox_depth", "collector_status__outbox_dropped",
)  # fmt: skip


def _board(request) -> FleetBoardFilter:
    hosts = Host.objects.visible_to(request.user).select_related("collector_status")
    return FleetBoardFilter(request.GET, queryset=hosts.only(*ROW_FIELDS), request=request)


@permission_required("inventory.view_host", raise_exception=True)
def fleet(request):
    board = _board(request)
    # Paged on the server, hosts with a problem first, then the chosen sort: in SQL over the
    # hosts' summaries, a host without a fresh one computed live (inventory.reports.board).
    ordered = fleet_board(board.qs, board.sort, problems_only=board.problems_only)
    page = page_of(request, ordered.rows)
    context = {
        "rows": page.object_list,
        "page": page,
        "problem_hosts": ordered.problem_hosts,
        "board": board,
        "form": board.form,
        "demo_progress": BackfillProgress.current(),
    }
    # The board refreshes itself by fetching just its page of rows.
    template = "inventory/fleet_rows.html" if request.GET.get("partial") else "inventory/fleet.html"
    return render(request, template, context)


@permission_required("inventory.view_host", raise_exception=True)
def fleet_export(request):
    """The fleet board as filtered and sorted on screen, every host, as CSV."""
    board = _board(request)
    ordered = fleet_board(
        board.qs, board.sort, problems_only=board.problems_only, problems_first=False
    )
    header = [
        "host", "cards", "best_card", "best_card_headroom_bytes", "worst_fragmentation",
        "fragmentation_status", "p99_status", "p99_detail", "ooms_24h", "problems",
    ]  # fmt: skip
    lines = [
        (r.host.name, r.cards, r.headroom_card, r.largest_headroom_bytes, r.worst_fragmentation,
         r.fragmentation_status, r.p99_status, r.p99_detail, r.ooms_24h, r.problems)
        for r in ordered.rows
    ]  # fmt: skip
    return csv_response("fleet-board", header, lines)


@permission_required("inventory.view_host", raise_exception=True)
def demo_history_progress(request):
    """How far the demo's history backfill is, per host; {} when none ran."""
    return JsonResponse(BackfillProgress.current() or {})
