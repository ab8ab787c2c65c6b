"""Derived figures for Prometheus: what teams that run Grafana want beside DCGM's raw ones."""

from __future__ import annotations

import datetime as dt
import math

from django.conf import settings
from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from inventory.models import Event, Host
from inventory.reports.fleet import RECENT

KV_WINDOW = dt.timedelta(days=7)


def _fetch(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


class ConsoleCollector:
    """A prometheus_client collector that reads the console's database at scrape time."""

    def __init__(self, hosts: list[Host], now: dt.datetime | None = None):
        self.hosts = hosts
        self.now = now or timezone.now()

    def collect(self):
        yield from self._cards()
        yield self._kv_gap()
        yield self._ooms()
        yield self._collector_age()

    def _cards(self):
        fragmentation = GaugeMetricFamily(
            "gpu_console_card_fragmentation_index",
            "Worst allocator fragmentation index on the card (1 - largest free block / free "
            "bytes in the pool), last two hours",
            labels=["host", "card"],
        )
        headroom = GaugeMetricFamily(
            "gpu_console_card_headroom_bytes",
            "Card total - driver reserved - peak used over the last two hours",
            labels=["host", "card"],
        )
        for host, index, total, reserved, used, frag in _fetch(
            """
            SELECT h.name, g.index, g.memory_total_bytes, max(r.reserved_max), max(r.used_max),
                   max(r.frag_index_max)
            FROM inventory_gpu g
            JOIN inventory_host h ON h.id = g.host_id
            JOIN inventory_card_rollup_1h r ON r.gpu_id = g.id AND r.bucket > %s
            WHERE g.host_id = ANY(%s)
            GROUP BY h.name, g.index, g.memory_total_bytes
            """,
            [self.now - RECENT, [h.pk for h in self.hosts]],
        ):
            labels = [host, str(index)]
            if frag is not None:
                fragmentation.add_metric(labels, frag)
            if used is not None:
                headroom.add_metric(labels, total - (reserved or 0) - used)
        yield fragmentation
        yield headroom

    def _kv_gap(self) -> GaugeMetricFamily:
        gap = GaugeMetricFamily(
            "gpu_console_kv_reservation_gap_bytes",
            "Recommended KV reservation (P95 concurrency x tokens x bytes/token x (1 + buffer),"
            " 7 days) minus the current one; positive means under-reserved",
            labels=["host", "deployment", "model"],
        )
        for host, deployment, model, current, tokens, p95 in _fetch(
            """
            SELECT h.name, d.id, m.name, d.kv_reservation_bytes, d.kv_tokens_per_request,
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY e.running_max)
            FROM inventory_engine_rollup_1h e
            JOIN inventory_deployment d ON d.id = e.deployment_id
            JOIN inventory_servedmodel m ON m.id = d.served_model_id
            JOIN inventory_host h ON h.id = d.host_id
            WHERE d.host_id = ANY(%s) AND e.bucket > %s AND d.status <> 'stopped'
              AND e.running_max IS NOT NULL
            GROUP BY h.name, d.id, m.name, d.kv_reservation_bytes, d.kv_tokens_per_request
            """,
            [[h.pk for h in self.hosts], self.now - KV_WINDOW],
        ):
            per_token = self._bytes_per_token.get(deployment)
            if not tokens or not per_token or p95 is None:
                continue
            recommended = math.ceil(p95) * tokens * per_token * (1 + settings.KV_BUFFER)
            gap.add_metric([host, str(deployment), model], recommended - current)
        return gap

    @property
    def _bytes_per_token(self) -> dict[int, int]:
        if not hasattr(self, "_per_token"):
            from inventory.models import Deployment

            self._per_token = {
                d.pk: d.served_model.effective_kv_bytes_per_token
                for d in Deployment.objects.filter(host__in=self.hosts).select_related(
                    "served_model"
                )
            }
        return self._per_token

    def _ooms(self) -> GaugeMetricFamily:
        ooms = GaugeMetricFamily(
            "gpu_console_ooms_24h", "OOM events in the last 24 hours", labels=["host"]
        )
        counts = dict(
            Event.objects.filter(host__in=self.hosts)
            .values("host__name")
            .annotate(
                n=Count(
                    "id",
                    filter=Q(kind=Event.Kind.OOM, at__gte=self.now - dt.timedelta(hours=24)),
                )
            )
            .values_list("host__name", "n")
        )
        for host in self.hosts:
            ooms.add_metric([host.name], counts.get(host.name, 0))
        return ooms

    def _collector_age(self) -> GaugeMetricFamily:
        age = GaugeMetricFamily(
            "gpu_console_collector_last_sample_age_seconds",
            "Seconds since the host's newest sample",
            labels=["host"],
        )
        for host in self.hosts:
            status = getattr(host, "collector_status", None)
            if status and status.last_sample_at:
                age.add_metric([host.name], (self.now - status.last_sample_at).total_seconds())
        return age
