from django import forms
from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from console.core.admin import AuditedModelAdmin
from console.core.auditing import Action
from inventory.models import Deployment, Gpu, Host, MigSlice, ServedModel


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ["index", "uuid", "product_name", "memory_total_bytes", "mig_mode", "compute_mode"]
    show_change_link = True


@admin.register(Host)
class HostAdmin(AuditedModelAdmin):
    list_display = ["name", "address", "status", "collector", "card_count"]
    list_filter = ["status", "collector"]
    search_fields = ["name", "address", "description"]
    inlines = [GpuInline]

    @admin.display(description=_("Cards"))
    def card_count(self, obj):
        return obj.gpus.count()

    def audit_host(self, obj):
        return obj


class MigSliceInline(admin.TabularInline):
    model = MigSlice
    extra = 0


@admin.register(Gpu)
class GpuAdmin(AuditedModelAdmin):
    list_display = ["__str__", "product_name", "memory_total_bytes", "mig_mode", "compute_mode"]
    list_filter = ["mig_mode", "compute_mode", "product_name", "host"]
    search_fields = ["uuid", "host__name", "product_name"]
    list_select_related = ["host"]
    inlines = [MigSliceInline]

    def audit_host(self, obj):
        return obj.host


@admin.register(MigSlice)
class MigSliceAdmin(AuditedModelAdmin):
    list_display = ["__str__", "profile_name", "start_slot", "size_slots", "memory_bytes"]
    list_filter = ["profile_name", "gpu__host"]
    search_fields = ["uuid", "gpu__host__name"]
    list_select_related = ["gpu__host"]

    def audit_host(self, obj):
        return obj.gpu.host


@admin.register(ServedModel)
class ServedModelAdmin(AuditedModelAdmin):
    list_display = ["name", "engine", "weights_bytes", "kv_per_token", "priority"]
    list_filter = ["engine", "priority"]
    search_fields = ["name"]

    @admin.display(description=_("KV bytes/token"))
    def kv_per_token(self, obj):
        return obj.effective_kv_bytes_per_token


class DeploymentAdminForm(forms.ModelForm):
    # Left empty, one pipeline stage (forms that predate the field keep working).
    pipeline_parallel = forms.IntegerField(
        min_value=1,
        max_value=64,
        required=False,
        initial=1,
        help_text=Deployment._meta.get_field("pipeline_parallel").help_text,
    )

    class Meta:
        model = Deployment
        fields = [
            "served_model",
            "host",
            "gpus",
            "mig_slice",
            "isolation_mode",
            "mps_active_thread_percentage",
            "kv_reservation_bytes",
            "kv_reservation_basis",
            "admission_policy",
            "status",
            "pod_namespace",
            "pod_selector",
            "log_path",
            "allocator_url",
            # How the deployment is spread and how its engine sizes its memory (gates 1 and 5).
            "pipeline_parallel",
            "engine_memory_fraction",
            "engine_kv_cache_bytes",
            "engine_overhead_bytes",
            "engine_context_tokens",
            "engine_version",
            "staggered_start",
        ]

    def clean_pod_selector(self):
        # An emptied field means no selector, not SQL NULL.
        return self.cleaned_data.get("pod_selector") or {}

    def clean_pipeline_parallel(self) -> int:
        return self.cleaned_data.get("pipeline_parallel") or 1

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("host") and "gpus" in cleaned:
            try:
                Deployment.validate_cards(
                    cleaned["host"], cleaned.get("isolation_mode"), cleaned["gpus"]
                )
            except forms.ValidationError as error:
                self.add_error(None, error)
        return cleaned


@admin.register(Deployment)
class DeploymentAdmin(AuditedModelAdmin):
    form = DeploymentAdminForm
    list_display = [
        "served_model",
        "host",
        "isolation_mode",
        "kv_reservation_bytes",
        "kv_reservation_basis",
        "admission_policy",
        "status",
    ]
    list_filter = ["isolation_mode", "kv_reservation_basis", "admission_policy", "status", "host"]
    search_fields = ["served_model__name", "host__name"]
    list_select_related = ["served_model", "host"]
    filter_horizontal = ["gpus"]
    # Deployment actions, not admin ones: the OOM history marks placement changes by them.
    audit_actions = {"add": Action.DEPLOYMENT_CREATE, "change": Action.DEPLOYMENT_CHANGE,
                     "delete": Action.DEPLOYMENT_DELETE}  # fmt: skip

    def audit_host(self, obj):
        return obj.host
