from django.contrib.auth.decorators import permission_required
from django.shortcuts import render

from console.audit.filters import AuditFilter
from console.audit.models import AuditEntry
from console.pagination import page_of


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
