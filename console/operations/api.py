"""GET /api/host-actions/: what the console asked of host agents and what they answered."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from console.core.api_access import VisibleList
from console.operations.filters import HostActionFilter
from console.operations.models import HostAction


class HostActionSerializer(serializers.ModelSerializer):
    host = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    approved_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    deployment = serializers.CharField(
        source="deployment.runtime_name", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = HostAction
        fields = [
            "id",
            "request_id",
            "host",
            "action",
            "params",
            "deployment",
            "origin",
            "state",
            "requested_by",
            "approved_by",
            "proposal",
            "policy",
            "created_at",
            "sent_at",
            "finished_at",
            "reason_code",
            "detail",
            "exit_code",
            "output_tail",
            "deliveries",
        ]
        read_only_fields = fields


@extend_schema(summary="Host actions, the newest first")
class HostActionList(VisibleList):
    model = HostAction
    serializer_class = HostActionSerializer
    filterset_class = HostActionFilter
    related = ("host", "deployment", "requested_by", "approved_by")
