"""{% firing_alerts %} (the fleet board) and {% firing_alerts host %} (a host page): the firing
alerts, each linking to its runbook note and its card or deployment, for users who may read
them. A template tag, so the inventory pages show alerts without importing this app."""

from django import template

from alerts.models import Alert

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
