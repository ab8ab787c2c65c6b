"""The telemetry API: hosts with their cards now, and card and process series."""

import datetime as dt
from itertools import groupby

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from console.core.access import get_visible_or_404
from console.core.api_access import CanView, VisibleList
from inventory.api.serializers import (
    CardLedgerSerializer,
    HostSummarySerializer,
    LedgerQuerySerializer,
    OomEventSerializer,
    SamplesQuerySerializer,
    SamplesSerializer,
)
from inventory.filters import HostFilter, OomEventFilter
from inventory.models import Event, Gpu, Host
from inventory.reports.collector import collector_health
from inventory.reports.headroom import recent_card_headroom
from inventory.reports.ledger import card_views
from inventory.reports.ledger_json import ledger_json
from inventory.reports.oom_history import DEFAULT_WINDOW_WEEKS
from inventory.timeseries import queries

MAX_POINTS = 5000
# Steps people can read on a chart, from a few seconds to a day.
_STEPS = (10, 30, 60, 300, 900, 3600, 4 * 3600, 86400)


@extend_schema(summary="Hosts and their cards now, by name")
class HostList(VisibleList):
    model = Host
    serializer_class = HostSummarySerializer
    filterset_class = HostFilter
    related = ("collector_status",)

    def get_queryset(self):
        return super().get_queryset().prefetch_related("gpus")

    def list(self, request):
        hosts = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(_host_summaries(request, hosts))


def _host_summaries(request, hosts: list[Host]) -> list[dict]:
    now = timezone.now()
    gpu_ids = [gpu.pk for host in hosts for gpu in host.gpus.all()]
    latest = queries.latest_card_samples(gpu_ids, within=dt.timedelta(days=1))
    headroom = {
        card.peaks.gpu_id: card.headroom_bytes
        for card in recent_card_headroom([host.pk for host in hosts], now)
    }
    answer = []
    for host in hosts:
        status = getattr(host, "collector_status", None)
        answer.append(
            {
                "name": host.name,
                "status": host.status,
                "url": request.build_absolute_uri(host.get_absolute_url()),
                "last_sample_at": status.last_sample_at if status else None,
                "collector": collector_health(status, now),
                "cards": [
                    _card_now(gpu, latest.get(gpu.pk), headroom.get(gpu.pk))
                    for gpu in host.gpus.all()
                ],
            }
        )
    return HostSummarySerializer(answer, many=True).data


@extend_schema(
    summary="OOM events, the newest first",
    description="The OOMs the OOM history page counts: the last "
    f"{DEFAULT_WINDOW_WEEKS} ISO weeks up to now unless weeks says otherwise, narrowed by host, "
    "model and triaged cause.",
)
class OomEventList(VisibleList):
    model = Event
    serializer_class = OomEventSerializer
    filterset_class = OomEventFilter
    related = ("host", "gpu", "deployment__served_model")
    ordering = ("-at", "-pk")


def _card_now(gpu: Gpu, sample: dict | None, headroom_bytes: int | None) -> dict:
    sample = sample or {}
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "product": gpu.product_name,
        "total_bytes": sample.get("total_bytes") or gpu.memory_total_bytes,
        "used_bytes": sample.get("used_last"),
        "reserved_bytes": sample.get("reserved_last"),
        "free_bytes": sample.get("free_last"),
        "sampled_at": sample.get("ts"),
        "lost": bool(sample.get("lost")),
        "headroom_bytes": headroom_bytes,
    }


def default_step(span: dt.timedelta) -> int:
    seconds = span.total_seconds()
    return next((step for step in _STEPS if seconds / step <= 500), _STEPS[-1])


class HostSamples(APIView):
    model = Host
    permission_classes = [CanView]

    @extend_schema(
        parameters=[SamplesQuerySerializer],
        responses={
            200: SamplesSerializer,
            400: OpenApiResponse(
                description="Bad input; the body says which field and why. Also a window the "
                "parameters allow one by one but not together: `from` not before `to`, longer "
                "than the longest retention (TELEMETRY_1H_RETENTION_DAYS), or a `step` too fine "
                f"for it (more than {MAX_POINTS} points a series)."
            ),
        },
        summary="A host's card and process series",
    )
    def get(self, request, name: str):
        host = get_visible_or_404(request.user, Host.objects, name=name)
        query = SamplesQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        end = query.validated_data.get("to") or timezone.now()
        start = query.validated_data.get("from") or end - dt.timedelta(hours=1)
        if start >= end:
            raise ValidationError({"from": "must be before to"})
        longest = dt.timedelta(days=settings.TELEMETRY_1H_RETENTION_DAYS)
        if end - start > longest:
            raise ValidationError(
                {"from": f"at most {longest.days} days before to (the longest retention)"}
            )
        step = query.validated_data.get("step") or default_step(end - start)
        if (end - start).total_seconds() / step > MAX_POINTS:
            raise ValidationError(
                {"step": f"too fine for this window: at most {MAX_POINTS} points a series"}
            )
        gpus = list(host.gpus.order_by("index"))
        if "gpu" in query.validated_data:
            gpus = [gpu for gpu in gpus if gpu.index == query.validated_data["gpu"]]
            if not gpus:
                raise ValidationError(
                    {"gpu": f"{host.name} has no card {query.validated_data['gpu']}"}
                )
        source = queries.choose_source(start, step)
        step = max(step, source.resolution_s)
        by_id = {gpu.pk: gpu for gpu in gpus}
        cards = queries.card_series(list(by_id), start, end, step, source)
        processes = queries.process_series(list(by_id), start, end, step, source)
        answer = {
            "host": host.name,
            "start": start,
            "end": end,
            "step_s": step,
            "source": source.name,
            "cards": [
                {
                    "index": by_id[gpu_id].index,
                    "uuid": by_id[gpu_id].uuid,
                    "points": [_without(row, "gpu_id") for row in rows],
                }
                for gpu_id, rows in groupby(cards, key=lambda row: row["gpu_id"])
            ],
            "processes": [
                {
                    "gpu": by_id[key[0]].index,
                    "pid": key[1],
                    "name": rows[-1]["name"],
                    "deployment": rows[-1]["deployment_id"],
                    "points": [
                        {
                            "ts": r["ts"],
                            "used_max": r["used_max"],
                            "frag_index_max": r["frag_index_max"],
                        }
                        for r in rows
                    ],
                }
                for key, group in groupby(processes, key=lambda row: (row["gpu_id"], row["pid"]))
                for rows in [list(group)]
            ],
        }
        return Response(SamplesSerializer(answer).data)


def _without(row: dict, key: str) -> dict:
    return {k: v for k, v in row.items() if k != key}


class HostLedger(APIView):
    model = Host
    permission_classes = [CanView]

    @extend_schema(
        parameters=[LedgerQuerySerializer],
        responses=CardLedgerSerializer(many=True),
        summary="Each card's memory ledger, now or at a past moment",
    )
    def get(self, request, name: str):
        host = get_visible_or_404(request.user, Host.objects, name=name)
        query = LedgerQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        at = query.validated_data.get("at")
        if at and at > timezone.now():
            raise ValidationError({"at": "is in the future"})
        return Response(CardLedgerSerializer(ledger_json(card_views(host, at)), many=True).data)
