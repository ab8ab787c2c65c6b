from django.contrib import admin

from console.core.admin import AuditedModelAdmin, ReadOnlyAdmin
from console.core.auditing import Action
from console.proposals.models import Decision, GateResult, LoadTest, Notification, Proposal


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class GateResultInline(ReadOnlyInline):
    model = GateResult
    fields = ["revision", "gate", "status", "summary", "checked_at"]


class DecisionInline(ReadOnlyInline):
    model = Decision
    fields = ["revision", "kind", "decided_by", "decided_at", "comment", "voided_at"]


class NotificationInline(ReadOnlyInline):
    model = Notification
    fields = ["event", "channel", "status", "attempts", "last_error", "sent_at"]


@admin.register(Proposal)
class ProposalAdmin(ReadOnlyAdmin):
    """Read-only: a proposal changes through the console, so every change is gated and audited."""

    list_display = ["__str__", "state", "revision", "author", "updated_at"]
    list_filter = ["state", "action", "host"]
    search_fields = ["served_model__name", "host__name", "rationale"]
    list_select_related = ["served_model", "host", "author"]
    inlines = [GateResultInline, DecisionInline, NotificationInline]


@admin.register(LoadTest)
class LoadTestAdmin(AuditedModelAdmin):
    """Load tests can only be deleted here (a wrong upload); the deletion is audited."""

    list_display = ["__str__", "source_format", "uploaded_by", "uploaded_at"]
    audit_actions = {"delete": Action.LOAD_TEST_DELETE}

    def audit_host(self, obj):
        return obj.proposal.host

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
