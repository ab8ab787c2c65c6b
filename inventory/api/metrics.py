"""GET /metrics: the console's derived figures in Prometheus' text format (token or session).

Every series belongs to one host, so `?shard=K/N` answers the hosts whose id is K modulo N:
N scrape jobs (one per K) split a large fleet, each host in exactly one of them, always the
same one.
"""

import re

from django.db.models import F
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from console.core.api_access import CanView
from inventory.models import Host
from inventory.reports.metrics import ConsoleCollector

SHARD = re.compile(r"^(\d{1,4})/(\d{1,4})$", re.ASCII)
MAX_SHARDS = 1024


def _shard(value: str) -> tuple[int, int]:
    match = SHARD.fullmatch(value)
    if match is None or not 0 <= int(match[1]) < int(match[2]) <= MAX_SHARDS:
        raise ValidationError(
            {"shard": _("K/N with 0 <= K < N <= %(most)d, e.g. 0/4") % {"most": MAX_SHARDS}}
        )
    return int(match[1]), int(match[2])


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

    @extend_schema(
        summary="Derived figures for Prometheus",
        parameters=[
            OpenApiParameter(
                "shard",
                OpenApiTypes.STR,
                description="K/N: only the hosts whose id is K modulo N (0 <= K < N <= 1024)",
                pattern=SHARD.pattern,
            )
        ],
        responses={200: str},
    )
    def get(self, request):
        registry = CollectorRegistry(auto_describe=False)
        hosts = Host.objects.visible_to(request.user).select_related("collector_status")
        if (shard := request.query_params.get("shard")) is not None:
            k, n = _shard(shard)
            hosts = hosts.alias(shard=F("pk") % n).filter(shard=k)
        hosts = list(hosts)
        registry.register(ConsoleCollector(hosts))
        return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
