"""Derived figures for Prometheus: what teams that run Grafana want beside DCGM's raw ones."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from inventory.analytics.kv import kv_reservation_gap_bytes, recommended_kv_reservation_bytes
from inventory.models import Deployment, Host
from inventory.reports.analysis import KV_WINDOW
from inventory.reports.headroom import recent_card_headroom
from inventory.reports.oom import OOM_WINDOW, oom_counts
from inventory.timeseries import queries


class ConsoleCollector:
    """A prometheus_client collector that reads the console's database at scrape time."""

    def __init__(self, hosts: list[Host], now: dt.datetime | None = None):
        self.hosts = hosts
        self.now = now or timezone.now()

    def collect(self):
        yield from self._cards()
        yield self._kv_gap()
        yield self._kv_per_card()
        yield self._ooms()
        yield self._collector_age()

    def _cards(self):
        fragmentation = GaugeMetricFamily(
            "gpu_console_card_fragmentation_index",
            "Worst allocator fragmentation index of a process on the card (1 - largest free "
            "block / free bytes in its pool, else inactive split / reserved), last two hours",
            labels=["host", "card"],
        )
        headroom = GaugeMetricFamily(
            "gpu_console_card_headroom_bytes",
            "Card total - driver reserved - peak used over the last two hours",
            labels=["host", "card"],
        )
        for card in recent_card_headroom([h.pk for h in self.hosts], self.now):
            labels = [card.peaks.host, str(card.peaks.index)]
            if card.peaks.fragmentation_index_peak is not None:
                fragmentation.add_metric(labels, card.peaks.fragmentation_index_peak)
            if card.headroom_bytes is not None:
                headroom.add_metric(labels, card.headroom_bytes)
        yield fragmentation
        yield headroom

    def _kv_gap(self) -> GaugeMetricFamily:
        gap = GaugeMetricFamily(
            "gpu_console_kv_reservation_gap_bytes",
            "Recommended KV reservation (ceil(P95 of the one-minute peaks of running requests,"
            " 7 days) x tokens x bytes/token x (1 + buffer)) minus the current one; positive "
            "means under-reserved",
            labels=["host", "deployment", "model"],
        )
        deployments = list(
            Deployment.objects.filter(host__in=self.hosts)
            .exclude(status=Deployment.Status.STOPPED)
            .select_related("host", "served_model")
        )
        p95 = queries.running_percentile(
            [d.pk for d in deployments], self.now - KV_WINDOW, self.now, 95
        )
        for deployment in deployments:
            tokens = deployment.kv_tokens_per_request
            per_token = deployment.served_model.effective_kv_bytes_per_token
            if not tokens or not per_token or deployment.pk not in p95:
                continue
            recommended = recommended_kv_reservation_bytes(
                p95[deployment.pk], tokens, per_token, settings.KV_BUFFER
            )
            gap.add_metric(
                [deployment.host.name, str(deployment.pk), deployment.served_model.name],
                kv_reservation_gap_bytes(recommended, deployment.kv_reservation_bytes),
            )
        return gap

    def _kv_per_card(self) -> GaugeMetricFamily:
        per_card = GaugeMetricFamily(
            "gpu_console_kv_reservation_per_card_bytes",
            "The KV reservation as each card of the deployment holds it: from the model's "
            "architecture and TP/PP (an MLA latent is whole on every card, GQA heads split "
            "over TP and replicated past the head count); split evenly when the shape is unknown",
            labels=["host", "deployment", "model", "basis"],
        )
        deployments = (
            Deployment.objects.filter(host__in=self.hosts)
            .exclude(status=Deployment.Status.STOPPED)
            .select_related("host", "served_model")
            .prefetch_related("gpus")
        )
        for deployment in deployments:
            card = deployment.kv_per_card()
            per_card.add_metric(
                [deployment.host.name, str(deployment.pk), deployment.served_model.name, card.how],
                card.bytes,
            )
        return per_card

    def _ooms(self) -> GaugeMetricFamily:
        ooms = GaugeMetricFamily(
            "gpu_console_ooms_24h", "OOM events in the last 24 hours", labels=["host"]
        )
        counts = oom_counts("host", [h.pk for h in self.hosts], self.now - OOM_WINDOW, self.now)
        for host in self.hosts:
            ooms.add_metric([host.name], counts.get(host.pk, 0))
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
