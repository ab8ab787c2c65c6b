from django.contrib import admin

from console.alerts.models import Alert, AlertRule, Notification, Silence


class ReadOnlyAdmin(admin.ModelAdmin):
    """Alerts are acted on in the console, which audits every change; the admin only shows."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AlertRule)
class AlertRuleAdmin(ReadOnlyAdmin):
    list_display = ["name", "slug", "kind", "severity", "enabled", "scope", "for_s"]
    list_filter = ["kind", "severity", "enabled"]


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = ["rule", "fingerprint", "state", "started_at", "ended_at"]
    list_filter = ["state", "severity"]


@admin.register(Silence)
class SilenceAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "starts_at", "ends_at", "created_by"]


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ["channel", "group", "status", "attempts", "created_at", "sent_at"]
    list_filter = ["channel", "status"]
