from contextlib import nullcontext

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.shortcuts import render
from django.utils.translation import gettext_lazy
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from console.core.api_tokens.models import ApiToken
from console.core.api_tokens.services import do_create_token, do_delete_token
from console.core.auditing import Action, snapshot
from console.core.auditing.changes import open_change, record
from console.core.models import AuditEntry


class ReadOnlyAdmin(admin.ModelAdmin):
    """For records that change only through the console's audited actions: the admin shows."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ChangeOpeningAdmin(admin.ModelAdmin):
    """Each admin form sent is one change: the object, its inlines and side effects share it."""

    def changeform_view(self, request, *args, **kwargs):
        with _change_for_post(request):
            return super().changeform_view(request, *args, **kwargs)

    def delete_view(self, request, *args, **kwargs):
        with _change_for_post(request):
            return super().delete_view(request, *args, **kwargs)

    def changelist_view(self, request, *args, **kwargs):
        # Bulk actions and list_editable saves write from the change list.
        with _change_for_post(request):
            return super().changelist_view(request, *args, **kwargs)


def _change_for_post(request):
    return open_change(request.user) if request.method == "POST" else nullcontext()


class AuditedModelAdmin(ChangeOpeningAdmin):
    """Admin edits land in the audit trail with before and after, like console edits do."""

    audit_actions = {"add": Action.ADMIN_ADD, "change": Action.ADMIN_CHANGE,
                     "delete": Action.ADMIN_DELETE}  # fmt: skip
    # Fields the trail must never hold (a password hash).
    audit_exclude: tuple[str, ...] = ()

    def audit_snapshot(self, obj) -> dict:
        return snapshot(obj, exclude=self.audit_exclude)

    def audit_host(self, obj):
        return None

    def _record(self, request, verb: str, obj, before, after, host) -> None:
        record(
            actor=request.user,
            action=self.audit_actions[verb],
            obj=obj,
            before=before,
            after=after,
            host=host,
            comment="via admin",
        )

    def save_model(self, request, obj, form, change):
        request._audit_before = (
            self.audit_snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
        )
        super().save_model(request, obj, form, change)

    def save_formset(self, request, form, formset, change):
        """Inline rows (cards of a host, slices of a card) each get a row in the same change."""
        host = self.audit_host(form.instance)
        stored = formset.model._default_manager.filter(
            pk__in=[inline.instance.pk for inline in formset.initial_forms]
        )
        before = {obj.pk: snapshot(obj) for obj in stored}
        for inline in formset.deleted_forms:
            if inline.instance.pk in before:
                self._record(request, "delete", inline.instance, before[inline.instance.pk],
                             None, host)  # fmt: skip
        super().save_formset(request, form, formset, change)
        for obj in formset.new_objects:
            self._record(request, "add", obj, None, snapshot(obj), host)
        for obj, _fields in formset.changed_objects:
            self._record(request, "change", obj, before.get(obj.pk), snapshot(obj), host)

    def save_related(self, request, form, formsets, change):
        # Many-to-many fields are saved here, after save_model; snapshot once they are.
        super().save_related(request, form, formsets, change)
        obj = form.instance
        self._record(request, "change" if change else "add", obj,
                     getattr(request, "_audit_before", None), self.audit_snapshot(obj),
                     self.audit_host(obj))  # fmt: skip

    def delete_model(self, request, obj):
        self._record(request, "delete", obj, self.audit_snapshot(obj), None, self.audit_host(obj))
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)

    def response_action(self, request, queryset):
        """Bulk actions (enable periodic tasks, ...) write through queryset.update: diff them."""
        if not request.POST.get("select_across"):
            queryset = queryset.filter(pk__in=request.POST.getlist(helpers.ACTION_CHECKBOX_NAME))
        before = {obj.pk: self.audit_snapshot(obj) for obj in queryset}
        response = super().response_action(request, queryset)
        for obj in queryset.model._default_manager.filter(pk__in=before):
            after = self.audit_snapshot(obj)
            if after != before[obj.pk]:
                self._record(request, "change", obj, before[obj.pk], after, self.audit_host(obj))
        return response


def audit_registered_admin(model, base=AuditedModelAdmin, **attributes) -> None:
    """Swap the admin another app registered for `model` for an audited subclass of it."""
    registered = type(admin.site.get_model_admin(model))
    admin.site.unregister(model)
    audited = type(f"Audited{registered.__name__}", (base, registered), attributes)
    admin.site.register(model, audited)


class _UserAudit(AuditedModelAdmin):
    """A user's role is their groups: the trail shows them by name, and never the password."""

    audit_exclude = ("password", "groups")

    def audit_snapshot(self, obj) -> dict:
        data = super().audit_snapshot(obj)
        if obj.pk is not None:
            data["groups"] = sorted(obj.groups.values_list("name", flat=True))
        return data

    def user_change_password(self, request, id, form_url=""):
        with _change_for_post(request):
            response = super().user_change_password(request, id, form_url)
            if request.method == "POST" and response.status_code == 302:
                user = get_user_model().objects.get(pk=id)
                record(actor=request.user, action=Action.ADMIN_CHANGE, obj=user, before=None,
                       after=None, comment="password set via admin")  # fmt: skip
        return response


audit_registered_admin(get_user_model(), base=_UserAudit)
audit_registered_admin(Group)
for _schedule_model in (PeriodicTask, IntervalSchedule, CrontabSchedule, SolarSchedule,
                        ClockedSchedule):  # fmt: skip
    audit_registered_admin(_schedule_model)


@admin.register(ApiToken)
class ApiTokenAdmin(ChangeOpeningAdmin):
    """Tokens by fingerprint. Adding one shows its key on the page that answers, once: never
    through a message, which would keep it in a cookie or the session."""

    list_display = ["user", "fingerprint", "created"]
    search_fields = ["user__username"]
    fields = ["user"]

    def has_change_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        token, obj.key_shown_once = do_create_token(acting_user=request.user, user=obj.user)
        obj.pk, obj.digest, obj.created = token.pk, token.digest, token.created

    def response_add(self, request, obj, post_url_continue=None):
        context = {
            **self.admin_site.each_context(request),
            "title": gettext_lazy("API token created"),
            "token": obj,
            "key": obj.key_shown_once,
            "opts": self.opts,
        }
        return render(request, "admin/console/apitoken/created.html", context)

    def delete_model(self, request, obj):
        do_delete_token(acting_user=request.user, token=obj)

    def delete_queryset(self, request, queryset):
        for token in queryset.select_related("user"):
            do_delete_token(acting_user=request.user, token=token)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor_name", "action", "change_id", "object_repr", "host"]
    list_filter = ["action", "content_type", "host"]
    search_fields = ["actor_name", "object_repr", "comment", "=change_id"]
    date_hierarchy = "at"
    readonly_fields = [field.name for field in AuditEntry._meta.fields]


admin.site.site_header = gettext_lazy("GPU co-location console administration")
admin.site.site_title = gettext_lazy("GPU co-location console")
