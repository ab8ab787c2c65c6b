"""GET /metrics: the console's derived figures in Prometheus' text format (token or session)."""

from drf_spectacular.utils import extend_schema
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from console.core.api_access import CanView
from inventory.models import Host
from inventory.reports.metrics import ConsoleCollector


class PrometheusText(BaseRenderer):
    media_type = "text/plain"
    format = "prometheus"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data if isinstance(data, bytes) else str(data).encode()


class Metrics(APIView):
    model = Host
    permission_classes = [CanView]
    renderer_classes = [PrometheusText]

    @extend_schema(summary="Derived figures for Prometheus", responses={200: str})
    def get(self, request):
        registry = CollectorRegistry(auto_describe=False)
        hosts = list(Host.objects.visible_to(request.user).select_related("collector_status"))
        registry.register(ConsoleCollector(hosts))
        return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
