"""The runbook list's filters, shared by /runbooks/ and GET /api/runbooks/."""

import django_filters
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from runbooks.models import RunbookNote


class NoteFilter(django_filters.FilterSet):
    scope = django_filters.ChoiceFilter(
        choices=RunbookNote.Scope.choices, empty_label=_("Any scope")
    )
    tag = django_filters.CharFilter(method="tagged", label=_("Tag"))
    q = django_filters.CharFilter(method="search", label=_("Search"))

    class Meta:
        model = RunbookNote
        fields = []

    def tagged(self, notes, name, value):
        # Tags are stored lower-case (the note form folds them).
        return notes.filter(tags__contains=[value.lower()])

    def search(self, notes, name, value):
        return notes.filter(Q(title__icontains=value) | Q(body__icontains=value))
