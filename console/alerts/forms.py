import datetime as dt
import json

from django import forms
from django.utils.translation import gettext_lazy as _

from console.alerts.models import AlertRule
from console.alerts.services import MATCHABLE_LABELS


class AcknowledgeForm(forms.Form):
    comment = forms.CharField(
        label=_("Comment"), max_length=2000, widget=forms.Textarea(attrs={"rows": 2})
    )


class SilenceForm(forms.Form):
    matchers = forms.CharField(
        label=_("Match labels"),
        max_length=1000,
        help_text=_("label=value, one a line; labels: %(labels)s")
        % {"labels": ", ".join(MATCHABLE_LABELS)},
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    minutes = forms.IntegerField(label=_("Minutes"), min_value=1, max_value=30 * 24 * 60)
    comment = forms.CharField(label=_("Why"), max_length=2000)

    def clean_matchers(self) -> dict:
        matchers = {}
        for line in self.cleaned_data["matchers"].splitlines():
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(_("Write each matcher as label=value."))
            matchers[key.strip()] = value.strip()
        return matchers

    @property
    def duration(self) -> dt.timedelta:
        return dt.timedelta(minutes=self.cleaned_data["minutes"])


class RuleForm(forms.ModelForm):
    params = forms.CharField(
        label=_("Parameters (JSON)"), widget=forms.Textarea(attrs={"rows": 3}), required=False
    )
    comment = forms.CharField(label=_("Why"), max_length=200, required=False)

    class Meta:
        model = AlertRule
        fields = ["name", "severity", "enabled", "scope", "scope_label", "host", "deployment",
                  "for_s", "resolve_after_s", "repeat_interval_s", "runbook_slug"]  # fmt: skip
        labels = {
            "name": _("Name"),
            "severity": _("Severity"),
            "enabled": _("Enabled"),
            "scope": _("Scope"),
            "scope_label": _("Scope label"),
            "host": _("Host"),
            "deployment": _("Deployment"),
            "for_s": _("Holding for (s)"),
            "resolve_after_s": _("Resolve after (s)"),
            "repeat_interval_s": _("Repeat every (s)"),
            "runbook_slug": _("Runbook"),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            self.initial["params"] = json.dumps(self.instance.params)

    def clean_params(self) -> dict:
        raw = self.cleaned_data["params"] or "{}"
        try:
            params = json.loads(raw)
        except ValueError as error:
            raise forms.ValidationError(_("Not JSON: %(error)s") % {"error": error}) from None
        if not isinstance(params, dict):
            raise forms.ValidationError(_("Parameters are a JSON object."))
        if self.instance.kind == AlertRule.Kind.EVENT and "event_kind" not in params:
            raise forms.ValidationError(_("An event rule names its event_kind."))
        for key in (
            "window_s",
            "used_fraction",
            "pressure_window_s",
            "min_gib",
            "stale_after_s",
            "max_lag_s",
        ):
            if key in params and not isinstance(params[key], int | float):
                raise forms.ValidationError(_("%(key)s must be a number.") % {"key": key})
        return params

    def clean(self):
        data = super().clean()
        for field in ("for_s", "resolve_after_s", "repeat_interval_s"):
            if data.get(field) is not None and data[field] < 0:
                self.add_error(field, _("Not negative."))
        return data

    def rule_fields(self) -> dict:
        return {name: self.cleaned_data[name] for name in [*self.Meta.fields, "params"]}
