"""The audit trail's filters, shared by /audit/ and GET /api/audit/."""

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _

from console.core.auditing.models import AuditEntry
from inventory.models import Host


def _visible_hosts(request):
    return Host.objects.visible_to(request.user)


class AuditFilter(django_filters.FilterSet):
    action = django_filters.CharFilter(
        lookup_expr="startswith",
        label=_("Action"),
        help_text=_("A prefix, e.g. runbook or proposal."),
    )
    actor = django_filters.CharFilter(field_name="actor_name", label=_("User"))
    # Typed, not chosen from a list: a select of every host is 10,000 options (500 KB) a page
    # with a big fleet. The name is still checked against the hosts the user may see.
    host = django_filters.ModelChoiceFilter(
        queryset=_visible_hosts,
        to_field_name="name",
        empty_label=_("Any host"),
        help_text=_("A host's name."),
        widget=forms.TextInput,
    )

    change = django_filters.UUIDFilter(
        field_name="change_id", label=_("Change"), help_text=_("One change's id: all its rows.")
    )

    class Meta:
        model = AuditEntry
        fields = []
