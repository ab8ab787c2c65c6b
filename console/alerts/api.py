"""GET /api/alerts/: the alerts the alerts page lists, with the same filters (?state=firing)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from console.alerts.filters import AlertFilter
from console.alerts.models import Alert
from console.alerts.payloads import alert_labels, runbook_url
from console.core.api_access import VisibleList


class AlertSerializer(serializers.ModelSerializer):
    url = serializers.SerializerMethodField()
    rule = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    host = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True, help_text="null: a fleet alert."
    )
    labels = serializers.SerializerMethodField(
        help_text="dcgm-exporter's labels (gpu, UUID, Hostname, modelName) and the console's."
    )
    runbook_url = serializers.SerializerMethodField()
    acknowledged_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = Alert
        fields = ["id", "url", "rule", "state", "severity", "host", "gpu", "deployment",
                  "labels", "values", "started_at", "firing_at", "ended_at", "last_crossed_at",
                  "acknowledged_by", "acknowledged_at", "acknowledge_comment",
                  "runbook_url"]  # fmt: skip

    def get_url(self, alert: Alert) -> str:
        return self.context["request"].build_absolute_uri(alert.get_absolute_url())

    def get_labels(self, alert: Alert) -> dict[str, str]:
        return alert_labels(alert)

    def get_runbook_url(self, alert: Alert) -> str:
        return runbook_url(alert)


@extend_schema(summary="Alerts: firing, pending, silenced and resolved, newest first")
class AlertList(VisibleList):
    model = Alert
    serializer_class = AlertSerializer
    filterset_class = AlertFilter
    related = ("rule", "host", "acknowledged_by")
    ordering = ("-started_at", "-id")
