"""The audit trail's filters, shared by /audit/ and GET /api/audit/."""

import django_filters

from console.audit.models import AuditEntry
from inventory.models import Host


def _visible_hosts(request):
    return Host.objects.visible_to(request.user)


class AuditFilter(django_filters.FilterSet):
    action = django_filters.CharFilter(
        lookup_expr="startswith", label="Action", help_text="A prefix, e.g. runbook or proposal."
    )
    actor = django_filters.CharFilter(field_name="actor_name", label="User")
    host = django_filters.ModelChoiceFilter(
        queryset=_visible_hosts,
        to_field_name="name",
        empty_label="Any host",
        help_text="A host's name.",
    )

    change = django_filters.UUIDFilter(
        field_name="change_id", label="Change", help_text="One change's id: all its rows."
    )

    class Meta:
        model = AuditEntry
        fields = []
