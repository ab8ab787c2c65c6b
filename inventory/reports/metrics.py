"""Derived figures for Prometheus: what teams that run Grafana want beside DCGM's raw ones.

A card's series carry dcgm-exporter's labels with its values (`Hostname`, `gpu` the index,
`UUID`, `device` nvidia<index>, `modelName` the product name; `GPU_I_ID` and `GPU_I_PROFILE`
for a MIG GPU instance), so a PromQL `on (Hostname, gpu)` or `on (UUID)` joins them with
DCGM_FI_* series; a host's or a deployment's carry `Hostname`. docs/metrics.md lists them.
"""

from __future__ import annotations

import datetime as dt
from functools import cached_property

from django.conf import settings
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from inventory.analytics.kv import kv_reservation_gap_bytes, recommended_kv_reservation_bytes
from inventory.models import Deployment, Gpu, Host
from inventory.reports.analysis import KV_WINDOW
from inventory.reports.event_totals import event_totals
from inventory.reports.headroom import recent_card_headroom
from inventory.telemetry.xid_events import xid_class
from inventory.timeseries import queries

CARD_LABELS = ["Hostname", "gpu", "UUID", "device", "modelName"]
INSTANCE_LABELS = [*CARD_LABELS, "GPU_I_ID", "GPU_I_PROFILE"]


def card_labels(host: str, index: int | None, uuid: str, model_name: str) -> list[str]:
    """dcgm-exporter's label values for a card (CARD_LABELS' order). An event the host
    reported without a card gets empty card labels, which Prometheus drops."""
    if index is None:
        return [host, "", "", "", ""]
    return [host, str(index), uuid, f"nvidia{index}", model_name]


class ConsoleCollector:
    """A prometheus_client collector that reads the console's database at scrape time."""

    def __init__(self, hosts: list[Host], now: dt.datetime | None = None):
        self.hosts = hosts
        self.now = now or timezone.now()

    @cached_property
    def _gpus(self) -> list[Gpu]:
        return list(Gpu.objects.filter(host__in=self.hosts).select_related("host"))

    def collect(self):
        yield from self._cards()
        yield self._kv_gap()
        yield self._kv_per_card()
        yield from self._event_counters()
        yield self._collector_age()

    def _cards(self):
        fragmentation = GaugeMetricFamily(
            "gpu_console_card_fragmentation_index",
            "Worst allocator fragmentation index of a process on the card (1 - largest free "
            "block / free bytes in its pool, else inactive split / reserved), last two hours",
            labels=CARD_LABELS,
        )
        headroom = GaugeMetricFamily(
            "gpu_console_card_headroom_bytes",
            "Card total - driver reserved - peak used over the last two hours",
            labels=CARD_LABELS,
        )
        gpus = {gpu.pk: gpu for gpu in self._gpus}
        for card in recent_card_headroom([h.pk for h in self.hosts], self.now):
            gpu = gpus[card.peaks.gpu_id]
            labels = card_labels(card.peaks.host, card.peaks.index, gpu.uuid, gpu.product_name)
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
            labels=["Hostname", "deployment", "model"],
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
            labels=["Hostname", "deployment", "model", "basis"],
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

    def _event_counters(self):
        ooms = CounterMetricFamily(
            "gpu_console_oom_events",
            "OOM events the console has stored for the card (or a MIG GPU instance of it), "
            "since it began",
            labels=INSTANCE_LABELS,
        )
        xids = CounterMetricFamily(
            "gpu_console_xid_events",
            "Xid events the console has stored for the card (or a MIG GPU instance of it), per "
            "code and the class its alert rules use, since it began",
            labels=[*INSTANCE_LABELS, "xid", "xid_class"],
        )
        seen = set()
        for total in event_totals([h.pk for h in self.hosts]):
            c = total.counted
            gi = "" if c.gpu_instance_id is None else str(c.gpu_instance_id)
            labels = [*card_labels(c.host, c.gpu_index, c.uuid, c.product_name), gi,
                      total.gpu_instance_profile]  # fmt: skip
            if c.kind == "oom":
                ooms.add_metric(labels, c.count)
                seen.add(tuple(labels))
            else:
                xids.add_metric([*labels, str(c.xid), xid_class(c.xid)], c.count)
        # A counter that first appears at 1 hides that first OOM from increase(): every card
        # starts at 0. (Xids are per code: a zero for each would be a hundred series a card.)
        for gpu in self._gpus:
            labels = [*card_labels(gpu.host.name, gpu.index, gpu.uuid, gpu.product_name), "", ""]
            if tuple(labels) not in seen:
                ooms.add_metric(labels, 0)
        yield ooms
        yield xids

    def _collector_age(self) -> GaugeMetricFamily:
        age = GaugeMetricFamily(
            "gpu_console_collector_last_sample_age_seconds",
            "Seconds since the host's newest sample",
            labels=["Hostname"],
        )
        for host in self.hosts:
            status = getattr(host, "collector_status", None)
            if status and status.last_sample_at:
                age.add_metric([host.name], (self.now - status.last_sample_at).total_seconds())
        return age
