from django.contrib import admin

from console import audit
from console.models import AuditEntry


class AuditedModelAdmin(admin.ModelAdmin):
    """Admin edits land in the audit trail with before and after, like console edits do."""

    audit_action_prefix = ""

    def save_model(self, request, obj, form, change):
        request._audit_before = audit.snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        # Many-to-many fields are saved here, after save_model; snapshot once they are.
        super().save_related(request, form, formsets, change)
        obj = form.instance
        audit.record(
            actor=request.user,
            action=f"{self._action_prefix()}.{'change' if change else 'create'}",
            obj=obj,
            before=getattr(request, "_audit_before", None),
            after=audit.snapshot(obj),
            host=self.audit_host(obj),
            comment="via admin",
        )

    def delete_model(self, request, obj):
        before = audit.snapshot(obj)
        host = self.audit_host(obj)
        audit.record(
            actor=request.user,
            action=f"{self._action_prefix()}.delete",
            obj=obj,
            before=before,
            after=None,
            host=host,
            comment="via admin",
        )
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)

    def audit_host(self, obj):
        return None

    def _action_prefix(self) -> str:
        return self.audit_action_prefix or self.model._meta.model_name


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["at", "actor_name", "action", "object_repr", "host"]
    list_filter = ["action", "content_type", "host"]
    search_fields = ["actor_name", "object_repr", "comment"]
    date_hierarchy = "at"
    readonly_fields = [field.name for field in AuditEntry._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
