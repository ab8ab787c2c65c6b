"""{% firing_alerts %} (the fleet board) and {% firing_alerts host %} (a host page): the firing
alerts, each linking to its runbook note and its card or deployment, for users who may read
them; {% event_runbook event %}: an event row's link to its rule's runbook note. Template
tags, so the inventory pages show alerts without importing this app."""

from django import template
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext

from console.alerts.models import Alert, AlertRule
from inventory.telemetry.xid_events import xid_class

register = template.Library()

# The board shows the newest; the alerts page has them all.
SHOWN = 20


@register.inclusion_tag("alerts/firing_panel.html", takes_context=True)
def firing_alerts(context, host=None):
    user = context["request"].user
    if not user.has_perm("alerts.view_alert"):
        return {"firing_alerts": []}
    alerts = Alert.objects.visible_to(user).firing().select_related("rule", "host", "gpu")
    if host is not None:
        alerts = alerts.filter(host=host)
    return {"firing_alerts": list(alerts.order_by("-firing_at", "-pk")[:SHOWN])}


def _event_runbooks(context) -> dict[tuple[str, str], str]:
    """(event kind, Xid class or "") -> runbook slug, from the enabled event rules; read once
    per page."""
    cache = context.render_context
    if "event_runbooks" not in cache:
        runbooks: dict[tuple[str, str], str] = {}
        rules = AlertRule.objects.filter(kind=AlertRule.Kind.EVENT, enabled=True).exclude(
            runbook_slug=""
        )
        for rule in rules.order_by("pk"):
            kind = rule.params.get("event_kind", "")
            for xid_class in rule.params.get("xid_classes") or [""]:
                runbooks.setdefault((kind, xid_class), rule.runbook_slug)
        cache["event_runbooks"] = runbooks
    return cache["event_runbooks"]


@register.simple_tag(takes_context=True)
def event_runbook(context, event) -> str:
    """A link to the runbook note the event's alert rule names, or nothing."""
    xid = xid_class(event.xid) if event.kind == "xid" else ""
    slug = _event_runbooks(context).get((event.kind, xid))
    if not slug:
        return ""
    return format_html(
        ' · <a href="{}">{}</a>', reverse("runbook-detail", args=[slug]), gettext("runbook")
    )
