"""Read what the rules look at, for the whole fleet at once, into console.alerts.conditions' facts.

Only the facts some enabled rule needs are read; each kind is a fixed number of queries
whatever the fleet's size (inventory.timeseries.alert_facts). One exception: interference is
computed per host, and only for hosts where deployments share a card's SMs (MPS or
time-slicing), by the same report the host page shows.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from dataclasses import replace

from django.conf import settings

from console.alerts.conditions import CardFact, DeploymentFact, EventFact, FleetFact, HostFact
from inventory.analytics.kv import recommended_kv_reservation_bytes, whole_requests
from inventory.analytics.memory_pressure import TenantMemory
from inventory.models import Deployment, Host, ServedModel
from inventory.reports.analysis import interference
from inventory.reports.headroom import recent_card_headroom
from inventory.reports.thresholds import fragmentation_thresholds
from inventory.timeseries import alert_facts, queries

CARD_KINDS = {"card_memory", "headroom_low", "fragmentation_red", "copeak"}
DEPLOYMENT_KINDS = {"kv_demand", "p99_over_slo", "interference"}
HOST_KINDS = {"collector_stale", "collector_faults"}
_SHARED_SMS = {Deployment.Isolation.MPS, Deployment.Isolation.TIME_SLICING}


@functools.lru_cache(maxsize=4096)
def _labels(raw) -> dict:
    """A host's labels as a raw query returns them (jsonb text), decoded once per text."""
    return json.loads(raw) if isinstance(raw, str) else {}


# The reservation depends on whole requests only: thousands of deployments share a few keys.
_recommended = functools.lru_cache(maxsize=65536)(recommended_kv_reservation_bytes)


def _fresh() -> dt.timedelta:
    """A sample older than this says nothing about now (the collector shows stale then)."""
    return dt.timedelta(seconds=settings.COLLECTOR_STALE_AFTER_S)


def read_facts(rules, now: dt.datetime) -> FleetFact:
    kinds = {rule.kind for rule in rules}
    facts = FleetFact(ingest_lag_s=None, dead_letters=0, fragmentation=fragmentation_thresholds())
    if kinds & CARD_KINDS:
        facts = replace(facts, cards=_cards(rules, now, kinds))
    if kinds & DEPLOYMENT_KINDS:
        facts = replace(facts, deployments=_deployments(rules, now, kinds))
    if kinds & (HOST_KINDS | {"ingest_lag"}):
        window = max(
            (float(r.params.get("window_s", 300)) for r in rules if r.kind == "collector_faults"),
            default=300.0,
        )
        hosts = alert_facts.hosts_now(now, dt.timedelta(seconds=window))
        facts = replace(facts, hosts=[_host(row, now) for row in hosts])
        batches = [row["last_batch_at"] for row in hosts if row["last_batch_at"]]
        if batches:
            facts = replace(facts, ingest_lag_s=(now - max(batches)).total_seconds())
    if "dead_letters" in kinds:
        facts = replace(facts, dead_letters=alert_facts.pending_dead_letters())
    event_rules = [rule for rule in rules if rule.kind == "event"]
    if event_rules:
        longest = max(event_window(rule) for rule in event_rules)
        wanted = sorted({rule.params["event_kind"] for rule in event_rules})
        rows = alert_facts.events_since(now - longest, wanted)
        facts = replace(facts, events=[_event(row) for row in rows])
    return facts


def event_window(rule) -> dt.timedelta:
    """An event rule crosses while an event of its kind is younger than its window."""
    return dt.timedelta(seconds=float(rule.params.get("window_s", 300)))


def events_within(facts: FleetFact, rule, now: dt.datetime) -> FleetFact:
    since = now - event_window(rule)
    return replace(facts, events=[e for e in facts.events if e.last_at > since])


def _cards(rules, now: dt.datetime, kinds: set[str]) -> list[CardFact]:
    rows = alert_facts.cards_now(now - _fresh())
    headroom = {}
    tenants: dict[int, list[TenantMemory]] = {}
    if "card_memory" in kinds:
        window = max(
            float(r.params.get("pressure_window_s", 300)) for r in rules if r.kind == "card_memory"
        )
        pressure_since = now - dt.timedelta(seconds=window)
        for row in alert_facts.card_tenants_now(now - _fresh(), pressure_since):
            tenants.setdefault(row["gpu_id"], []).append(
                TenantMemory(
                    name=row["name"],
                    engine=row["engine"],
                    held_bytes=int(row["held_bytes"]),
                    kv_usage=row["kv_usage"],
                    kv_pressure=row["kv_pressure"],
                )
            )
    if kinds & {"headroom_low", "copeak"}:
        host_ids = sorted({row["host_id"] for row in rows})
        headroom = {c.peaks.gpu_id: c.headroom_bytes for c in recent_card_headroom(host_ids, now)}
    return [
        CardFact(
            host_id=row["host_id"],
            host=row["host"],
            host_labels=_labels(row["host_labels"]),
            gpu_id=row["gpu_id"],
            index=row["index"],
            uuid=row["uuid"],
            model_name=row["product_name"],
            total_bytes=row["total_bytes"],
            used_bytes=row["used_last"],
            fragmentation_index=row["frag_index_max"],
            tenants=row["tenants"],
            headroom_bytes=headroom.get(row["gpu_id"]),
            tenant_memory=tuple(tenants.get(row["gpu_id"], ())),
            reserved_bytes=row["reserved_bytes"],
        )
        for row in rows
    ]


def _deployments(rules, now: dt.datetime, kinds: set[str]) -> list[DeploymentFact]:
    rows = alert_facts.deployments_now(now - _fresh())
    recommended: dict[int, int] = {}
    if "kv_demand" in kinds:
        window = max(float(r.params.get("window_s", 900)) for r in rules if r.kind == "kv_demand")
        ids = [row["deployment_id"] for row in rows]
        p95 = queries.running_percentile(ids, now - dt.timedelta(seconds=window), now, 95)
        models = {m.pk: m for m in ServedModel.objects.filter(
            pk__in={row["served_model_id"] for row in rows})}  # fmt: skip
        for row in rows:
            concurrency = p95.get(row["deployment_id"])
            per_token = models[row["served_model_id"]].effective_kv_bytes_per_token
            if concurrency is not None and row["kv_tokens_per_request"] and per_token:
                recommended[row["deployment_id"]] = _recommended(
                    whole_requests(concurrency),
                    row["kv_tokens_per_request"],
                    per_token,
                    settings.KV_BUFFER,
                )
    flagged = _interference(rows, now) if "interference" in kinds else set()
    return [
        DeploymentFact(
            deployment_id=row["deployment_id"],
            host_id=row["host_id"],
            host=row["host"],
            host_labels=_labels(row["host_labels"]),
            name=row["name"],
            p99_s=row["p99_s"],
            slo_ms=row["slo_ms"],
            recommended_kv_bytes=recommended.get(row["deployment_id"]),
            kv_reservation_bytes=row["kv_reservation_bytes"],
            interference_flagged=row["deployment_id"] in flagged,
        )
        for row in rows
    ]


def _interference(rows: list[dict], now: dt.datetime) -> set[int]:
    shared = sorted({row["host_id"] for row in rows if row["isolation_mode"] in _SHARED_SMS})
    flagged = set()
    for host in Host.objects.filter(pk__in=shared):
        for report in interference(host, now):
            if report.flagged:
                # The report names a deployment "<model> #<pk>".
                flagged.add(int(report.deployment.rsplit("#", 1)[1]))
    return flagged


def _host(row: dict, now: dt.datetime) -> HostFact:
    last = row["last_sample_at"]
    return HostFact(
        host_id=row["host_id"],
        host=row["host"],
        host_labels=_labels(row["host_labels"]),
        last_sample_age_s=(now - last).total_seconds() if last else None,
        faults_recent=int(row["faults_recent"]),
        faults_before=int(row["faults_before"]),
    )


def _event(row: dict) -> EventFact:
    return EventFact(
        host_id=row["host_id"],
        host=row["host"],
        host_labels=_labels(row["host_labels"]),
        kind=row["kind"],
        gpu_id=row["gpu_id"],
        gpu_index=row["gpu_index"],
        uuid=row["uuid"],
        model_name=row["model_name"],
        deployment_id=row["deployment_id"],
        deployment=row["deployment"],
        xid=row["xid"],
        count=row["count"],
        last_at=row["last_at"],
    )
