from decimal import Decimal

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from console.proposals.loadtests import LoadTestFormatError, combine
from console.proposals.models import Decision, Proposal
from console.proposals.services import EDITABLE
from inventory.models import Deployment, Gpu, Host, MigSlice, ServedModel
from runbooks.models import MPS_NOTE_SLUG

GIB = 1024**3


class CardChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, gpu: Gpu) -> str:
        return f"{gpu} · {gpu.product_name} · {gpu.memory_total_bytes / GIB:.0f} GiB"


class ProposalForm(forms.ModelForm):
    kv_reservation_gib = forms.DecimalField(
        label=_("KV reservation (GiB)"),
        min_value=Decimal(0),
        max_digits=10,
        decimal_places=3,
        help_text=_("All the deployment's cards together; the memory gate splits it over them."),
    )
    gpus = CardChoiceField(
        label=_("Cards"),
        queryset=Gpu.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("The target cards, or tick “let the solver choose”."),
    )
    mps_acknowledged = forms.BooleanField(
        required=False,
        label=_(
            "I have read “MPS is not hard isolation”: one client's fatal fault takes down "
            "every client on the GPU, and the MPS server refuses new clients until they exit."
        ),
        help_text=f"Needed for MPS, or for cards that show interference (runbook note "
        f"{MPS_NOTE_SLUG}). Stored with your name and the time.",
    )

    class Meta:
        model = Proposal
        # What the services accept, the KV reservation typed in GiB rather than bytes.
        fields = [*(name for name in EDITABLE if name != "kv_reservation_bytes"), "gpus"]
        widgets = {"rationale": forms.Textarea(attrs={"rows": 5})}
        # The fields whose label Django would derive from the field's name, untranslated.
        labels = {
            "action": _("Action"),
            "served_model": _("Served model"),
            "host": _("Host"),
            "deployment": _("Deployment"),
            "card_count": _("Card count"),
            "isolation_mode": _("Isolation mode"),
            "rollout_steps": _("Rollout steps"),
            "rationale": _("Rationale"),
        }

    field_order = [
        "action",
        "deployment",
        "served_model",
        "host",
        "gpus",
        "let_solver_choose",
        "card_count",
        "mig_slice",
        "isolation_mode",
        "mps_active_thread_percentage",
        "mps_acknowledged",
        "kv_reservation_gib",
        "kv_reservation_basis",
        "kv_tokens_per_request",
        "expected_p95_concurrency",
        "expected_request_rate",
        "admission_policy",
        "canary_share_pct",
        "rollout_steps",
        "rationale",
    ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["mig_slice"].label = _("MIG slice")
        self.fields["served_model"].queryset = ServedModel.objects.order_by("name")
        self.fields["served_model"].required = False
        self.fields["served_model"].help_text = "Taken from the deployment when you pick one."
        self.fields["host"].queryset = Host.objects.order_by("name")
        self.fields["host"].required = False
        self.fields["deployment"].queryset = (
            Deployment.objects.exclude(status=Deployment.Status.STOPPED)
            .select_related("served_model", "host")
            .order_by("host__name", "served_model__name")
        )
        self.fields["gpus"].queryset = Gpu.objects.select_related("host").order_by(
            "host__name", "index"
        )
        self.fields["mig_slice"].queryset = MigSlice.objects.select_related("gpu__host")
        if self.instance.pk:
            self.fields["kv_reservation_gib"].initial = (
                Decimal(self.instance.kv_reservation_bytes) / GIB
            ).quantize(Decimal("0.001"))
            self.fields["mps_acknowledged"].initial = self.instance.mps_acknowledged_at is not None

    def clean(self):
        cleaned = super().clean()
        deployment = cleaned.get("deployment")
        if deployment is not None:
            cleaned["served_model"] = cleaned.get("served_model") or deployment.served_model
            cleaned["host"] = cleaned.get("host") or deployment.host
        if cleaned.get("served_model") is None and "served_model" not in self.errors:
            self.add_error("served_model", "Pick the model, or the deployment it runs in.")
        if cleaned.get("host") is None and "host" not in self.errors:
            self.add_error("host", "Pick the host.")
        if cleaned.get("kv_reservation_gib") is not None:
            self.instance.kv_reservation_bytes = round(cleaned["kv_reservation_gib"] * GIB)
        return cleaned

    def _post_clean(self):
        super()._post_clean()
        if self.errors:
            return
        try:
            self.instance.validate_cards(list(self.cleaned_data.get("gpus") or []))
        except ValidationError as error:
            self._update_errors(error)

    def proposal_fields(self) -> dict:
        fields = {name: self.cleaned_data[name] for name in self.Meta.fields if name != "gpus"}
        fields["kv_reservation_bytes"] = self.instance.kv_reservation_bytes
        return fields


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(label=_("Decision"), choices=Decision.Kind.choices)
    comment = forms.CharField(
        label=_("Comment"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("Required to reject or to send back: say why."),
    )


class CommentForm(forms.Form):
    comment = forms.CharField(
        label=_("Comment"), required=False, widget=forms.Textarea(attrs={"rows": 2})
    )


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput(attrs={"accept": ".json,.csv"}))
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        if isinstance(data, list | tuple):
            return [super(MultipleFileField, self).clean(item, initial) for item in data]
        return [super().clean(data, initial)]


class LoadTestForm(forms.Form):
    MAX_FILE_BYTES = 5 * 1024**2
    MAX_FILES = 32

    files = MultipleFileField(
        label=_("Result files"),
        help_text=_(
            "One vllm bench serve --save-result JSON per model (all run at once), or one "
            "CSV with columns model, card, p99_latency_ms, card_peak_gib."
        ),
    )
    card_peaks = forms.CharField(
        required=False,
        label=_("Per-card memory peaks"),
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "a100-node:0,71.5"}),
        help_text=_(
            "One card,peak_gib line per target card, as the test measured them (the "
            "vLLM JSON has no GPU memory)."
        ),
    )

    def clean(self):
        cleaned = super().clean()
        files = cleaned.get("files") or []
        if len(files) > self.MAX_FILES:
            self.add_error("files", f"At most {self.MAX_FILES} files (one per model).")
            return cleaned
        if any("\x00" in f.name for f in files):
            self.add_error("files", "A file name holds a NUL character.")
            return cleaned
        too_big = [f.name for f in files if f.size > self.MAX_FILE_BYTES]
        if too_big:
            self.add_error("files", f"Larger than 5 MiB: {', '.join(too_big)}.")
            return cleaned
        try:
            cleaned["run"] = combine(
                [(f.name, f.read()) for f in files], cleaned.get("card_peaks", "")
            )
        except LoadTestFormatError as error:
            field = "card_peaks" if str(error).startswith("card peaks") else "files"
            self.add_error(field, str(error))
        return cleaned
