from django.contrib import admin

from console.alerts.models import Alert, AlertRule, Notification, Silence
from console.core.admin import ReadOnlyAdmin


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
