"""The navigation's firing-alert badge, on every page of a user who may read alerts."""

from django.utils.functional import SimpleLazyObject

from console.alerts.models import Alert


def firing_alerts(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not user.has_perm("alerts.view_alert"):
        return {}
    # Counted only where a template shows it: fragments without the navigation never do.
    return {"firing_alert_count": SimpleLazyObject(Alert.objects.firing().count)}
