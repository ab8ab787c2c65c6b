"""GET /api/runbooks/: the notes the runbook list shows, with the same filters."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from console.core.api_access import VisibleList
from runbooks.filters import NoteFilter
from runbooks.models import RunbookNote


class NoteSerializer(serializers.ModelSerializer):
    url = serializers.SerializerMethodField()
    host = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True, help_text="null: not a host's note."
    )
    served_model = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True, help_text="null: not a model's note."
    )

    class Meta:
        model = RunbookNote
        fields = [
            "slug",
            "url",
            "title",
            "scope",
            "host",
            "served_model",
            "tags",
            "from_library",
            "body",
            "version",
            "updated_at",
        ]

    def get_url(self, note: RunbookNote) -> str:
        return self.context["request"].build_absolute_uri(note.get_absolute_url())


@extend_schema(summary="Runbook notes by title, their Markdown bodies included")
class NoteList(VisibleList):
    model = RunbookNote
    serializer_class = NoteSerializer
    filterset_class = NoteFilter
    related = ("host", "served_model")
    ordering = ("title", "pk")
