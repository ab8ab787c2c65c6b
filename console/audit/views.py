from django.contrib.auth.decorators import permission_required
from django.shortcuts import render

from console.audit.filters import AuditFilter
from console.core.auditing.models import AuditEntry
from console.core.csv_export import csv_response
from console.core.pagination import page_of


@permission_required("console.view_auditentry", raise_exception=True)
def audit_list(request):
    entries = AuditFilter(
        request.GET,
        queryset=AuditEntry.objects.visible_to(request.user).select_related("host", "content_type"),
        request=request,
    )
    return render(
        request,
        "console/audit_list.html",
        {"page": page_of(request, entries.qs), "form": entries.form},
    )


EXPORT_CHUNK = 2000


@permission_required("console.view_auditentry", raise_exception=True)
def audit_export(request):
    """The audit trail as filtered on its page, every row, as CSV."""
    entries = AuditFilter(
        request.GET,
        queryset=AuditEntry.objects.visible_to(request.user).select_related("host", "content_type"),
        request=request,
    )
    rows = (
        (e.at, e.change_id, e.actor_name, e.action, e.content_type.model, e.object_id,
         e.object_repr, e.host.name if e.host else "", ", ".join(e.changed_fields), e.comment)
        for e in entries.qs.order_by("at", "id").iterator(chunk_size=EXPORT_CHUNK)
    )  # fmt: skip
    header = ["time", "change", "actor", "action", "object_type", "object_id", "object",
              "host", "changed_fields", "comment"]  # fmt: skip
    return csv_response("audit-trail", header, rows)
