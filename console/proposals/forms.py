from decimal import Decimal

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from console.proposals.gates.loadtest_report import LoadTestFormatError, combine
from console.proposals.guided import kv_recommendation
from console.proposals.models import Decision, Proposal
from console.proposals.services import EDITABLE
from inventory.models import Deployment, Gpu, Host, MigSlice, ServedModel
from runbooks.models import MPS_NOTE_SLUG

GIB = 1024**3


class CardChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, gpu: Gpu) -> str:
        return f"{gpu} · {gpu.product_name} · {gpu.memory_total_bytes / GIB:.0f} GiB"


class ReplacedChoiceField(forms.ModelMultipleChoiceField):
    """A running deployment of the host, named so the author can tell its replicas apart."""

    def label_from_instance(self, deployment: Deployment) -> str:
        if deployment.mig_slice_id:
            where = str(deployment.mig_slice)
        else:
            indexes = sorted(gpu.index for gpu in deployment.gpus.all())
            where = ngettext("card %(cards)s", "cards %(cards)s", len(indexes)) % {
                "cards": ", ".join(map(str, indexes)) or gettext("none")
            }
        return (
            f"{deployment.served_model.name} #{deployment.pk} · {where} · "
            f"{deployment.get_isolation_mode_display()}"
        )


class HostField(forms.ModelChoiceField):
    """A host typed or picked by name (the form searches hosts rather than listing them);
    a primary key is taken too, as older links and clients send one."""

    def to_python(self, value):
        if value in self.empty_values:
            return None
        text = str(value).strip()
        host = self.queryset.filter(name=text).first()
        if host is None and text.isdecimal():
            host = self.queryset.filter(pk=int(text)).first()
        if host is None:
            raise ValidationError(
                _("No host is called “%(name)s”: search for it and pick one."),
                code="invalid_choice",
                params={"name": text[:80]},
            )
        return host

    def prepare_value(self, value):
        if isinstance(value, Host):
            return value.name
        if isinstance(value, int) or (isinstance(value, str) and value.isdecimal()):
            host = self.queryset.filter(pk=int(value)).only("name").first()
            return host.name if host else value
        return value


def _chosen(queryset, value):
    """The object a bound or initial value names, or None (the form cleans it properly)."""
    if isinstance(value, queryset.model):
        return value
    if value in (None, "") or not str(value).isdecimal():
        return None
    return queryset.filter(pk=int(value)).first()


class ProposalForm(forms.ModelForm):
    """The guided proposal: the model, then the host (searched by name), then only that host's
    cards; a blank KV reservation takes the advisor's recommendation."""

    kv_reservation_gib = forms.DecimalField(
        label=_("KV reservation (GiB)"),
        required=False,
        min_value=Decimal(0),
        max_digits=10,
        decimal_places=3,
        help_text=_(
            "All the deployment's cards together; the memory gate splits it over them. "
            "Left blank, the advisor's recommendation is taken."
        ),
    )
    gpus = CardChoiceField(
        label=_("Cards"),
        queryset=Gpu.objects.select_related("host"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("The target cards, or tick “let the solver choose”."),
    )
    replaces = ReplacedChoiceField(
        label=_("Replaces"),
        queryset=Deployment.objects.select_related("host", "served_model"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_(
            "Running deployments of this host the change takes over from, such as the "
            "time-shared replicas a card group replaces: stopped when it is applied, and no "
            "longer counted on their cards by the gates."
        ),
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
        fields = [
            *(name for name in EDITABLE if name != "kv_reservation_bytes"),
            "gpus",
            "replaces",
        ]
        field_classes = {"host": HostField}

        widgets = {
            "rationale": forms.Textarea(attrs={"rows": 4}),
            "isolation_mode": forms.RadioSelect,
            "host": forms.TextInput(
                attrs={"autocomplete": "off", "placeholder": _("host name"), "role": "combobox",
                       "aria-autocomplete": "list", "aria-controls": "host-matches",
                       "aria-expanded": "false"}
            ),
        }  # fmt: skip
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
            "engine_memory_fraction": _("Engine memory fraction"),
            "engine_kv_cache_bytes": _("Engine KV cache bytes"),
            "engine_overhead_bytes": _("Engine GPU overhead bytes"),
            "engine_context_tokens": _("Engine context tokens"),
            "engine_version": _("Engine version"),
            "staggered_start": _("Starts after its card's other engines"),
        }

    field_order = [
        "action",
        "served_model",
        "deployment",
        "host",
        "gpus",
        "let_solver_choose",
        "card_count",
        "mig_slice",
        "replaces",
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

    def __init__(self, *args, preview: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.preview = preview
        self.kv_advice = None
        self.fields["mig_slice"].label = _("MIG slice")
        self.fields["served_model"].queryset = ServedModel.objects.order_by("name")
        self.fields["served_model"].required = False
        self.fields["served_model"].help_text = "Taken from the deployment when you pick one."
        self.fields["host"].queryset = Host.objects.all()
        self.fields["host"].required = False
        self.fields["host"].help_text = "Type part of its name; each match shows its best card."
        self.fields["deployment"].queryset = Deployment.objects.exclude(
            status=Deployment.Status.STOPPED
        ).select_related("served_model", "host")
        self.fields["mig_slice"].queryset = MigSlice.objects.select_related("gpu__host")
        if preview:
            self.fields["rationale"].required = False
        self.chosen_model = _chosen(ServedModel.objects.all(), self._value("served_model"))
        self.chosen_deployment = _chosen(
            self.fields["deployment"].queryset, self._value("deployment")
        )
        if self.chosen_model is None and self.chosen_deployment is not None:
            self.chosen_model = self.chosen_deployment.served_model
        self.chosen_host = self._host()
        self._narrow_choices()
        if self.instance.pk:
            self.fields["kv_reservation_gib"].initial = (
                Decimal(self.instance.kv_reservation_bytes) / GIB
            ).quantize(Decimal("0.001"))
            self.fields["mps_acknowledged"].initial = self.instance.mps_acknowledged_at is not None

    def _value(self, name: str):
        if self.is_bound:
            return self.data.get(self.add_prefix(name))
        value = self.initial.get(name, self.fields[name].initial)
        return value if value is not None else getattr(self.instance, f"{name}_id", None)

    def _host(self) -> Host | None:
        value = self._value("host")
        if isinstance(value, Host):
            return value
        if value not in (None, ""):
            try:
                return self.fields["host"].to_python(value)
            except ValidationError:
                return None
        return self.chosen_deployment.host if self.chosen_deployment else None

    def _narrow_choices(self) -> None:
        """Render only what belongs to the chosen model and host: a fleet of 1,000 hosts must
        not become 8,000 checkboxes. Validation still takes any real object, so a card or a
        replaced deployment of another host gets its own explanation rather than "not a valid
        choice"."""
        deployments = self.fields["deployment"].queryset.order_by("host__name", "pk")
        if self.chosen_model is not None:
            deployments = deployments.filter(served_model=self.chosen_model)
        elif self.chosen_host is not None:
            deployments = deployments.filter(host=self.chosen_host)
        else:
            deployments = deployments.none()
        self.fields["deployment"].widget.choices = [
            ("", "---------"),
            *((d.pk, str(d)) for d in deployments[:200]),
        ]
        host = self.chosen_host
        self.fields["gpus"].widget.choices = [
            (gpu.pk, self.fields["gpus"].label_from_instance(gpu))
            for gpu in (host.gpus.select_related("host").order_by("index") if host else [])
        ]
        slices = MigSlice.objects.filter(gpu__host=host) if host else MigSlice.objects.none()
        self.fields["mig_slice"].widget.choices = [
            ("", "---------"),
            *((s.pk, str(s)) for s in slices.select_related("gpu__host")),
        ]
        running = (
            host.deployments.exclude(status=Deployment.Status.STOPPED)
            .select_related("served_model", "mig_slice__gpu__host")
            .prefetch_related("gpus")
            .order_by("served_model__name", "pk")
            if host
            else Deployment.objects.none()
        )
        self.fields["replaces"].widget.choices = [
            (d.pk, self.fields["replaces"].label_from_instance(d)) for d in running
        ]

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
        if cleaned.get("kv_reservation_gib") is None and "kv_reservation_gib" not in self.errors:
            self._take_advice(cleaned)
        if cleaned.get("kv_reservation_gib") is not None:
            self.instance.kv_reservation_bytes = round(cleaned["kv_reservation_gib"] * GIB)
        return cleaned

    def _take_advice(self, cleaned: dict) -> None:
        if cleaned.get("served_model") is None:
            return
        sketch = Proposal(
            served_model=cleaned["served_model"],
            deployment=cleaned.get("deployment"),
            kv_tokens_per_request=cleaned.get("kv_tokens_per_request")
            or getattr(cleaned.get("deployment"), "kv_tokens_per_request", None),
            expected_p95_concurrency=cleaned.get("expected_p95_concurrency"),
            kv_reservation_basis=cleaned.get("kv_reservation_basis") or "p95",
        )
        self.kv_advice = kv_recommendation(sketch, timezone.now())
        if self.kv_advice is None:
            self.add_error(
                "kv_reservation_gib",
                _(
                    "Give the reservation: the advisor has no basis (no engine history for "
                    "the deployment; state tokens per request and the expected P95 "
                    "concurrency)."
                ),
            )
            return
        cleaned["kv_reservation_gib"] = Decimal(self.kv_advice.gib)

    def _post_clean(self):
        super()._post_clean()
        if self.errors:
            return
        for validate, name in (
            (self.instance.validate_cards, "gpus"),
            (self.instance.validate_replaced, "replaces"),
        ):
            try:
                validate(list(self.cleaned_data.get(name) or []))
            except ValidationError as error:
                self._update_errors(error)

    def proposal_fields(self) -> dict:
        """The proposal's own fields; its cards and what it replaces go in on their own."""
        fields = {
            name: self.cleaned_data[name]
            for name in self.Meta.fields
            if name not in ("gpus", "replaces")
        }
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
