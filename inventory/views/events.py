from django.contrib import messages
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from console.access import get_changeable_or_403
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
