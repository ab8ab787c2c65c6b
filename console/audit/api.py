"""GET /api/audit/: the audit trail, newest first, with the page's filters."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from console.audit.filters import AuditFilter
from console.core.api_access import VisibleList
from console.core.auditing.models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True)
    object_type = serializers.CharField(source="content_type.model", read_only=True)
    host = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    changed_fields = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "at",
            "actor",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "host",
            "changed_fields",
            "before",
            "after",
            "comment",
        ]


@extend_schema(summary="The audit trail, the newest entry first")
class AuditList(VisibleList):
    model = AuditEntry
    serializer_class = AuditEntrySerializer
    filterset_class = AuditFilter
    related = ("host", "content_type")
