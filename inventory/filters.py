"""The filters of inventory's lists, one FilterSet per list, shared by its page and its API.

Choices that name objects (hosts, models) come from what the user may see; an invalid value
answers 400 on the API and is dropped, with the form saying why, on a page.
"""

import django_filters
from django import forms
from django.db.models import Q
from django.utils import timezone
from django.utils.functional import cached_property, lazy
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from drf_spectacular.utils import extend_schema_field

from inventory.models import Event, Host, ServedModel
from inventory.reports import oom_history
from inventory.reports.fleet import SORTS


def _visible_hosts(request):
    return Host.objects.visible_to(request.user)


def _visible_models(request):
    return ServedModel.objects.visible_to(request.user)


def _last_weeks_now(weeks: int) -> str:
    return ngettext("Last %(count)d week", "Last %(count)d weeks", weeks) % {"count": weeks}


# The choices are made at import; their labels are translated when a form shows them.
_last_weeks = lazy(_last_weeks_now, str)


class HostFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=Host.Status.choices, empty_label=_("Any status"))
    q = django_filters.CharFilter(method="search", label=_("Host or address"))
    label = django_filters.CharFilter(
        method="with_label", label=_("Label"), help_text=_("key, or key:value, e.g. rack:r12")
    )

    class Meta:
        model = Host
        fields = []

    def search(self, hosts, name, value):
        return hosts.filter(Q(name__icontains=value) | Q(address__icontains=value))

    def with_label(self, hosts, name, value):
        key, has_value, wanted = value.partition(":")
        if has_value:
            return hosts.filter(labels__contains={key: wanted})
        return hosts.filter(labels__has_key=key)


class FleetBoardForm(forms.Form):
    # Problems and the sort order are figures of each row, computed after the query: the form
    # checks them, the view applies them.
    problems = forms.BooleanField(required=False, label=_("problems only"))
    sort = forms.ChoiceField(choices=[(key, f"sort: {key}") for key in SORTS], required=False)


class FleetBoardFilter(HostFilter):
    class Meta(HostFilter.Meta):
        form = FleetBoardForm

    def filter_queryset(self, queryset):
        # Only the filters narrow the query; the form's own fields are the view's to apply.
        for name, value in self.form.cleaned_data.items():
            if name in self.filters:
                queryset = self.filters[name].filter(queryset, value)
        return queryset

    @property
    def problems_only(self) -> bool:
        return bool(self._chosen("problems"))

    @property
    def sort(self) -> str:
        return self._chosen("sort") or "name"

    def _chosen(self, name: str):
        self.is_valid()  # validates once; cleaned_data then holds the valid fields only
        return self.form.cleaned_data.get(name)


class OomEventFilter(django_filters.FilterSet):
    """The OOMs of the history page, its CSV export and GET /api/oom/.

    Which OOMs a selection means is oom_history.oom_events(), the one definition the page's
    counts use too; the filters here give the form, the validation and the API's parameters.
    """

    weeks = extend_schema_field(
        {
            "type": "integer",
            "enum": list(oom_history.WINDOW_WEEKS),
            "default": oom_history.DEFAULT_WINDOW_WEEKS,
        }
    )(
        django_filters.TypedChoiceFilter(
            label=_("Window"),
            choices=[
                (
                    weeks,
                    _last_weeks(weeks),
                )
                for weeks in oom_history.WINDOW_WEEKS
            ],
            coerce=int,
            help_text=_("Whole ISO weeks up to now."),
        )
    )
    # Typed, not chosen from a list: a select of every host is 10,000 options a page with a
    # big fleet. The name is still checked against the hosts the user may see.
    host = django_filters.ModelChoiceFilter(
        queryset=_visible_hosts,
        to_field_name="name",
        empty_label=_("All"),
        help_text=_("A host's name."),
        widget=forms.TextInput,
    )
    model = django_filters.ModelChoiceFilter(
        field_name="deployment__served_model",
        queryset=_visible_models,
        to_field_name="name",
        empty_label=_("All"),
        help_text=_("A served model's name."),
    )
    cause = django_filters.ChoiceFilter(
        choices=list(oom_history.CAUSE_LABELS.items()), empty_label=_("All")
    )

    class Meta:
        model = Event
        fields = []

    def __init__(self, data=None, *args, **kwargs):
        data = data.copy() if data is not None else {}
        data.setdefault("weeks", str(oom_history.DEFAULT_WINDOW_WEEKS))
        super().__init__(data, *args, **kwargs)

    @cached_property
    def selection(self) -> oom_history.Selection:
        """The valid filters, up to now; an invalid one is dropped (the form shows why) rather
        than emptying the page."""
        self.is_valid()
        chosen = self.form.cleaned_data
        weeks = chosen.get("weeks") or oom_history.DEFAULT_WINDOW_WEEKS
        start, end = oom_history.window(weeks, timezone.now())
        return oom_history.Selection(
            start=start,
            end=end,
            host=chosen.get("host"),
            served_model=chosen.get("model"),
            cause=chosen.get("cause") or "",
        )

    def filter_queryset(self, queryset):
        return oom_history.oom_events(queryset, self.selection)
