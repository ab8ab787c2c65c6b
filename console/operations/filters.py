"""Host actions' filters, for GET /api/host-actions/."""

import django_filters
from django.utils.translation import gettext_lazy as _

from console.core.filters import MomentFilter
from console.operations.models import HostAction
from inventory.models import Host


def _visible_hosts(request):
    return Host.objects.visible_to(request.user)


class HostActionFilter(django_filters.FilterSet):
    host = django_filters.ModelChoiceFilter(
        queryset=_visible_hosts,
        to_field_name="name",
        empty_label=_("Any host"),
        help_text=_("A host's name."),
    )
    state = django_filters.ChoiceFilter(choices=HostAction.State.choices, label=_("State"))
    origin = django_filters.ChoiceFilter(choices=HostAction.Origin.choices, label=_("Origin"))
    action = django_filters.CharFilter(label=_("Action"), help_text=_("e.g. reload_with."))
    since = MomentFilter(field_name="created_at", lookup_expr="gte", label=_("Asked since"))

    class Meta:
        model = HostAction
        fields = []
