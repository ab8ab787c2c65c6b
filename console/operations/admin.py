from django.contrib import admin

from console.core.admin import ReadOnlyAdmin
from console.operations.models import (
    DefragPlan,
    DegradationRun,
    HostAction,
    MpsRecovery,
    StandingPolicy,
)


@admin.register(HostAction)
class HostActionAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "host", "action", "origin", "state", "requested_by"]
    list_filter = ["state", "origin", "action"]
    search_fields = ["host__name", "=request_id"]
    list_select_related = ["host", "requested_by", "deployment"]


@admin.register(StandingPolicy)
class StandingPolicyAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "host", "signed_by", "revoked_at"]
    list_select_related = ["host", "signed_by"]


@admin.register(DegradationRun)
class DegradationRunAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "host", "state"]
    list_select_related = ["host"]


@admin.register(MpsRecovery)
class MpsRecoveryAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "host", "state"]
    list_select_related = ["host"]


@admin.register(DefragPlan)
class DefragPlanAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "host", "state"]
    list_select_related = ["host"]
