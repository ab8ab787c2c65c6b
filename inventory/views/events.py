from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from console.core.access import get_changeable_or_403
from console.core.csv_export import csv_response
from inventory.models import Event
from inventory.services import AlreadyAcknowledged, do_acknowledge_event


@require_POST
def acknowledge_event(request, pk: int):
    event = get_changeable_or_403(
        request.user, Event.objects.select_related("host"), action="acknowledge", pk=pk
    )
    try:
        do_acknowledge_event(event, acting_user=request.user)
        messages.success(request, _("Acknowledged: %(event)s.") % {"event": event})
    except AlreadyAcknowledged as error:
        messages.info(request, _("%(event)s: %(error)s.") % {"event": event, "error": error})
    return redirect(event.host)


@permission_required("inventory.view_event", raise_exception=True)
def event_export(request):
    """Every event the user may see (OOMs, Xids, process exits, MPS faults), oldest first;
    ?host=<name> and ?kind=<kind> narrow it."""
    events = Event.objects.visible_to(request.user).select_related(
        "host", "gpu", "deployment__served_model", "acknowledged_by"
    )
    if request.GET.get("host"):
        events = events.filter(host__name=request.GET["host"][:200])
    if request.GET.get("kind") in Event.Kind.values:
        events = events.filter(kind=request.GET["kind"])
    rows = (
        (e.at, e.host.name, "" if e.gpu is None else e.gpu.index, e.kind, e.xid,
         e.deployment.served_model.name if e.deployment else "", e.cause, e.cause_explanation,
         e.acknowledged_by.get_username() if e.acknowledged_by else "", e.acknowledged_at)
        for e in events.order_by("at", "pk").iterator(chunk_size=2000)
    )  # fmt: skip
    header = ["time", "host", "card", "kind", "xid", "model", "cause", "explanation",
              "acknowledged_by", "acknowledged_at"]  # fmt: skip
    return csv_response("events", header, rows)
