from django import forms
from django.utils.translation import gettext_lazy as _

from runbooks.models import RunbookNote


class TagsField(forms.CharField):
    """Tags typed as `mps, isolation`."""

    def prepare_value(self, value):
        if isinstance(value, list | tuple):
            return ", ".join(value)
        return value

    def to_python(self, value) -> list[str]:
        text = super().to_python(value)
        tags = [tag.strip().lower() for tag in text.split(",") if tag.strip()]
        for tag in tags:
            if len(tag) > 32 or not all(ch.isalnum() or ch == "-" for ch in tag):
                raise forms.ValidationError(
                    _("%(tag)r: a tag is letters, digits and dashes, at most 32 characters.")
                    % {"tag": tag}
                )
        return tags


class NoteForm(forms.ModelForm):
    tags = TagsField(
        label=_("Tags"),
        required=False,
        help_text=_(
            "Comma-separated. Global notes tagged mps, mig, gpu-group or time-slicing "
            "show on hosts that use that isolation."
        ),
    )
    summary = forms.CharField(
        label=_("Summary"),
        max_length=200,
        required=False,
        help_text=_("What changed, for the history."),
    )
    # The version the editor started from; a mismatch on save means someone else saved first.
    version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = RunbookNote
        fields = ["title", "scope", "host", "served_model", "tags", "body"]
        widgets = {"body": forms.Textarea(attrs={"rows": 24, "class": "markdown"})}
        labels = {"title": _("Title"), "scope": _("Scope"), "host": _("Host"), "body": _("Body")}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["host"].queryset = self.fields["host"].queryset.order_by("name")
        self.fields["served_model"].queryset = self.fields["served_model"].queryset.order_by("name")
        self.fields["served_model"].label = _("Model")
        if self.instance.pk:
            self.fields["version"].initial = self.instance.version

    def clean(self):
        cleaned = super().clean()
        scope = cleaned.get("scope")
        if scope == RunbookNote.Scope.HOST and not cleaned.get("host"):
            self.add_error("host", _("A host note needs its host."))
        if scope == RunbookNote.Scope.MODEL and not cleaned.get("served_model"):
            self.add_error("served_model", _("A model note needs its model."))
        if scope != RunbookNote.Scope.HOST:
            cleaned["host"] = None
        if scope != RunbookNote.Scope.MODEL:
            cleaned["served_model"] = None
        return cleaned

    def _post_clean(self):
        # The model's own full_clean runs in the service, against the row it locks.
        pass

    def note_fields(self) -> dict:
        return {name: self.cleaned_data[name] for name in self.Meta.fields}
