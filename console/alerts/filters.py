"""The alert list's filters, shared by /alerts/ and GET /api/alerts/."""

import django_filters
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from console.alerts.conditions import silenced_by
from console.alerts.models import Alert, AlertRule, Severity, Silence
from console.alerts.payloads import alert_labels

SILENCED = "silenced"
STATES = [*Alert.State.choices, (SILENCED, _("Silenced (firing, muted)"))]


def silenced_ids(alerts) -> list[int]:
    matchers = [s.matchers for s in Silence.objects.active(timezone.now())]
    if not matchers:
        return []
    return [
        alert.pk
        for alert in alerts.filter(state=Alert.State.FIRING).select_related("rule")
        if any(silenced_by(m, alert_labels(alert)) for m in matchers)
    ]


class AlertFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(
        choices=STATES, method="in_state", empty_label=_("Any state")
    )
    severity = django_filters.ChoiceFilter(choices=Severity.choices, empty_label=_("Any"))
    rule = django_filters.ModelChoiceFilter(
        queryset=AlertRule.objects.all(), to_field_name="slug", empty_label=_("Any rule")
    )
    host = django_filters.CharFilter(field_name="host__name", label=_("Host"))
    q = django_filters.CharFilter(method="search", label=_("Search"))

    class Meta:
        model = Alert
        fields = []

    def in_state(self, alerts, name, value):
        if value == SILENCED:
            return alerts.filter(pk__in=silenced_ids(alerts))
        return alerts.filter(state=value)

    def search(self, alerts, name, value):
        return alerts.filter(
            Q(rule__name__icontains=value)
            | Q(fingerprint__icontains=value)
            | Q(acknowledge_comment__icontains=value)
        )
