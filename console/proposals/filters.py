"""The proposal list's filters, shared by /proposals/ and GET /api/proposals/."""

import django_filters
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from console.proposals.models import Proposal
from inventory.models import Host


def _visible_hosts(request):
    return Host.objects.visible_to(request.user)


class ProposalFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=Proposal.STATES, empty_label=_("Any state"))
    host = django_filters.ModelChoiceFilter(
        queryset=_visible_hosts,
        to_field_name="name",
        empty_label=_("Any host"),
        help_text=_("A host's name."),
    )
    author = django_filters.CharFilter(field_name="author__username", label=_("Author"))
    q = django_filters.CharFilter(method="search", label=_("Model or rationale"))

    class Meta:
        model = Proposal
        fields = []

    def search(self, proposals, name, value):
        return proposals.filter(
            Q(rationale__icontains=value) | Q(served_model__name__icontains=value)
        )
