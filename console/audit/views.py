import uuid

from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.shortcuts import render

from console.models import AuditEntry


@permission_required("console.view_auditentry", raise_exception=True)
def audit_list(request):
    entries = AuditEntry.objects.visible_to(request.user).select_related("host", "content_type")
    action = request.GET.get("action", "").strip()
    if action:
        entries = entries.filter(action__startswith=action)
    actor = request.GET.get("actor", "").strip()
    if actor:
        entries = entries.filter(actor_name=actor)
    change = _change_id(request.GET.get("change", ""))
    if change is not None:
        entries = entries.filter(change_id=change)
    page = Paginator(entries, 50).get_page(request.GET.get("page"))
    return render(
        request,
        "console/audit_list.html",
        {"page": page, "action": action, "actor": actor, "change": change},
    )


def _change_id(raw: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(raw.strip())
    except ValueError:
        return None
