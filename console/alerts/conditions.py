"""What crosses each kind of rule, from plain facts the evaluator reads in a few fleet-wide
queries. Pure: no Django, no database; every figure comes from inventory.analytics.

Each condition takes a rule's parameters and the facts, and returns the crossings with the
labels an alert carries: dcgm-exporter's (`gpu`, `UUID`, `Hostname`, `modelName`) for a card,
and the console's own (`host`, `deployment`, `model`, `xid_class`).
A new kind of rule is one function here and one entry in CONDITIONS.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from console.alerts.evaluation import Crossing
from inventory.analytics.fragmentation import Status, Thresholds
from inventory.analytics.memory_pressure import TenantMemory, card_pressure
from inventory.telemetry.xid_events import xid_class

GIB = 1024**3


@dataclass(frozen=True)
class CardFact:
    host_id: int
    host: str
    host_labels: Mapping[str, str]
    gpu_id: int
    index: int
    uuid: str
    model_name: str
    total_bytes: int
    used_bytes: int | None  # newest sample's used memory; None: no recent sample
    fragmentation_index: float | None
    tenants: int  # deployments placed on the card that are not stopped
    headroom_bytes: int | None  # inventory.analytics.headroom over the recent window
    # What each tenant holds on the card and its engine's own KV state (card_memory only).
    tenant_memory: tuple[TenantMemory, ...] = ()
    reserved_bytes: int = 0  # the newest sample's driver-reserved memory (nvmlMemory_v2)


@dataclass(frozen=True)
class DeploymentFact:
    deployment_id: int
    host_id: int
    host: str
    host_labels: Mapping[str, str]
    name: str  # the served model's name
    p99_s: float | None  # newest engine sample's P99
    slo_ms: int | None
    recommended_kv_bytes: int | None  # P95 demand + buffer (inventory.analytics.kv)
    kv_reservation_bytes: int
    interference_flagged: bool = False


@dataclass(frozen=True)
class HostFact:
    host_id: int
    host: str
    host_labels: Mapping[str, str]
    last_sample_age_s: float | None  # None: never sampled
    faults_recent: int  # collector faults counted in the rule's window
    faults_before: int  # the same length of window before it


@dataclass(frozen=True)
class EventFact:
    host_id: int
    host: str
    host_labels: Mapping[str, str]
    kind: str  # inventory Event.Kind value
    gpu_id: int | None
    gpu_index: int | None
    uuid: str
    model_name: str
    deployment_id: int | None
    deployment: str
    xid: int | None
    count: int
    last_at: dt.datetime


@dataclass(frozen=True)
class FleetFact:
    ingest_lag_s: float | None  # seconds since the newest batch of any collected host
    dead_letters: int  # pending
    cards: Sequence[CardFact] = ()
    deployments: Sequence[DeploymentFact] = ()
    hosts: Sequence[HostFact] = ()
    events: Sequence[EventFact] = ()
    fragmentation: Thresholds = field(default_factory=lambda: Thresholds(0.3, 0.5))


def _card_labels(card: CardFact) -> dict[str, str]:
    return {
        "Hostname": card.host,
        "host": card.host,
        "gpu": str(card.index),
        "UUID": card.uuid,
        "modelName": card.model_name,
    }


def _card_crossing(card: CardFact, kind: str, values: dict) -> Crossing:
    return Crossing(
        fingerprint=f"{kind}:{card.host}:{card.index}",
        labels=_card_labels(card),
        values=values,
        host_id=card.host_id,
        gpu_id=card.gpu_id,
        host_labels=card.host_labels,
    )


def card_memory(params: Mapping, facts: FleetFact) -> list[Crossing]:
    """The card is about to run out, by tenant kind (inventory.analytics.memory_pressure):
    its on-demand part past the share (reason ``on_demand``), or a preallocating engine's own
    KV pool at the share while it preempts or queues (reason ``kv_pool``)."""
    limit = float(params.get("used_fraction", 0.95))
    crossings = []
    for card in facts.cards:
        if card.used_bytes is None or not card.total_bytes:
            continue
        pressure = card_pressure(
            card.total_bytes, card.used_bytes, card.tenant_memory, limit, card.reserved_bytes
        )
        if not (pressure.on_demand_over or pressure.full_pools):
            continue
        values = {
            "reason": "on_demand" if pressure.on_demand_over else "kv_pool",
            "used_fraction": round(card.used_bytes / card.total_bytes, 4),
            "on_demand_fraction": round(pressure.on_demand_fraction, 4),
            "threshold": limit,
            "used_bytes": card.used_bytes,
            "total_bytes": card.total_bytes,
            "preallocated_bytes": pressure.preallocated_bytes,
            "limit_bytes": pressure.limit_bytes,
            "full_pools": list(pressure.full_pools),
        }
        crossings.append(_card_crossing(card, "card_memory", values))
    return crossings


def headroom_low(params: Mapping, facts: FleetFact) -> list[Crossing]:
    """A host's best single card has less than N GiB left: nothing bigger can land there."""
    limit = float(params.get("min_gib", 8.0)) * GIB
    best: dict[int, CardFact] = {}
    for card in facts.cards:
        if card.headroom_bytes is None:
            continue
        held = best.get(card.host_id)
        if held is None or card.headroom_bytes > held.headroom_bytes:
            best[card.host_id] = card
    return [
        Crossing(
            fingerprint=f"headroom_low:{card.host}",
            labels={
                "Hostname": card.host,
                "host": card.host,
                "gpu": str(card.index),
                "UUID": card.uuid,
                "modelName": card.model_name,
            },
            values={"headroom_gib": round(card.headroom_bytes / GIB, 2), "threshold": limit / GIB},
            host_id=card.host_id,
            host_labels=card.host_labels,
        )
        for card in best.values()
        if card.headroom_bytes < limit
    ]


def fragmentation_red(params: Mapping, facts: FleetFact) -> list[Crossing]:
    """The allocator's fragmentation is red on a card that has tenants: do not add a model."""
    crossings = []
    for card in facts.cards:
        index = card.fragmentation_index
        if index is None or card.tenants == 0:
            continue
        if facts.fragmentation.classify(index) == Status.RED:
            values = {"fragmentation_index": round(index, 3), "threshold": facts.fragmentation.red,
                      "tenants": card.tenants}  # fmt: skip
            crossings.append(_card_crossing(card, "fragmentation_red", values))
    return crossings


def copeak_over_capacity(params: Mapping, facts: FleetFact) -> list[Crossing]:
    """Co-tenants' joint peak in the window went past what the card can hold (negative
    headroom), whatever each one's own P95 says."""
    min_tenants = int(params.get("min_tenants", 2))
    return [
        _card_crossing(
            card,
            "copeak",
            {"headroom_gib": round(card.headroom_bytes / GIB, 2), "tenants": card.tenants},
        )
        for card in facts.cards
        if card.headroom_bytes is not None
        and card.headroom_bytes < 0
        and card.tenants >= min_tenants
    ]


def _deployment_crossing(d: DeploymentFact, kind: str, values: dict) -> Crossing:
    return Crossing(
        fingerprint=f"{kind}:{d.deployment_id}",
        labels={
            "Hostname": d.host,
            "host": d.host,
            "deployment": str(d.deployment_id),
            "model": d.name,
        },
        values=values,
        host_id=d.host_id,
        deployment_id=d.deployment_id,
        host_labels=d.host_labels,
    )


def kv_demand_over_reservation(params: Mapping, facts: FleetFact) -> list[Crossing]:
    return [
        _deployment_crossing(
            d,
            "kv_demand",
            {
                "recommended_gib": round(d.recommended_kv_bytes / GIB, 2),
                "reserved_gib": round(d.kv_reservation_bytes / GIB, 2),
            },
        )
        for d in facts.deployments
        if d.recommended_kv_bytes is not None and d.recommended_kv_bytes > d.kv_reservation_bytes
    ]


def p99_over_slo(params: Mapping, facts: FleetFact) -> list[Crossing]:
    return [
        _deployment_crossing(
            d, "p99_over_slo", {"p99_ms": round(d.p99_s * 1000, 1), "slo_ms": d.slo_ms}
        )
        for d in facts.deployments
        if d.p99_s is not None and d.slo_ms and d.p99_s * 1000 > d.slo_ms
    ]


def interference(params: Mapping, facts: FleetFact) -> list[Crossing]:
    return [
        _deployment_crossing(d, "interference", {"flagged": 1})
        for d in facts.deployments
        if d.interference_flagged
    ]


def _host_crossing(host: HostFact, kind: str, values: dict) -> Crossing:
    return Crossing(
        fingerprint=f"{kind}:{host.host}",
        labels={"Hostname": host.host, "host": host.host},
        values=values,
        host_id=host.host_id,
        host_labels=host.host_labels,
    )


def collector_stale(params: Mapping, facts: FleetFact) -> list[Crossing]:
    limit = float(params.get("stale_after_s", 120))
    return [
        _host_crossing(
            host,
            "collector_stale",
            {"age_s": host.last_sample_age_s and round(host.last_sample_age_s), "threshold": limit},
        )
        for host in facts.hosts
        if host.last_sample_age_s is not None and host.last_sample_age_s > limit
    ]


def collector_faults_rising(params: Mapping, facts: FleetFact) -> list[Crossing]:
    """More NVML or scrape faults in the last window than in the one before, and at least
    `min_faults` of them."""
    minimum = int(params.get("min_faults", 3))
    return [
        _host_crossing(
            host, "collector_faults", {"faults": host.faults_recent, "before": host.faults_before}
        )
        for host in facts.hosts
        if host.faults_recent >= minimum and host.faults_recent > host.faults_before
    ]


def _fleet_crossing(kind: str, values: dict) -> Crossing:
    return Crossing(fingerprint=kind, labels={}, values=values)


def ingest_lag(params: Mapping, facts: FleetFact) -> list[Crossing]:
    limit = float(params.get("max_lag_s", 300))
    lag = facts.ingest_lag_s
    if lag is None or lag <= limit:
        return []
    return [_fleet_crossing("ingest_lag", {"lag_s": round(lag), "threshold": limit})]


def dead_letters(params: Mapping, facts: FleetFact) -> list[Crossing]:
    minimum = int(params.get("min_count", 1))
    if facts.dead_letters < minimum:
        return []
    return [_fleet_crossing("dead_letters", {"count": facts.dead_letters})]


def event(params: Mapping, facts: FleetFact) -> list[Crossing]:
    """Events of `event_kind` seen in the rule's window (the evaluator reads that window);
    Xid rules may name `xid_classes` to keep."""
    kind = params["event_kind"]
    classes = set(params.get("xid_classes") or ())
    crossings: dict[str, Crossing] = {}
    for e in facts.events:
        if e.kind != kind:
            continue
        labels = {"Hostname": e.host, "host": e.host, "event": kind}
        if e.gpu_index is not None:
            labels.update(gpu=str(e.gpu_index), UUID=e.uuid, modelName=e.model_name)
        if e.deployment:
            labels.update(deployment=str(e.deployment_id), model=e.deployment)
        if kind == "xid":
            labels["xid_class"] = xid_class(e.xid)
            if classes and labels["xid_class"] not in classes:
                continue
        fingerprint = ":".join([kind, e.host, labels.get("gpu", "-"), labels.get("xid_class", "-"),
                                labels.get("deployment", "-")])  # fmt: skip
        held = crossings.get(fingerprint)
        count = e.count + (held.values["count"] if held else 0)
        values = {"count": count, **({"xid": e.xid} if e.xid is not None else {})}
        crossings[fingerprint] = Crossing(fingerprint, labels, values, e.host_id, e.gpu_id,
                                          e.deployment_id, e.host_labels)  # fmt: skip
    return list(crossings.values())


CONDITIONS: dict[str, Callable[[Mapping, FleetFact], list[Crossing]]] = {
    "card_memory": card_memory,
    "headroom_low": headroom_low,
    "fragmentation_red": fragmentation_red,
    "kv_demand": kv_demand_over_reservation,
    "copeak": copeak_over_capacity,
    "p99_over_slo": p99_over_slo,
    "interference": interference,
    "collector_stale": collector_stale,
    "collector_faults": collector_faults_rising,
    "ingest_lag": ingest_lag,
    "dead_letters": dead_letters,
    "event": event,
}


@dataclass(frozen=True)
class Scope:
    kind: str  # fleet, host_label, host, deployment
    host_id: int | None = None
    deployment_id: int | None = None
    label: str = ""  # host_label: "key=value"


def in_scope(scope: Scope, crossing: Crossing) -> bool:
    if scope.kind == "fleet":
        return True
    if scope.kind == "host":
        return crossing.host_id == scope.host_id
    if scope.kind == "deployment":
        return crossing.deployment_id == scope.deployment_id
    key, _, value = scope.label.partition("=")
    return crossing.host_labels.get(key.strip()) == value.strip()


def silenced_by(matchers: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """A silence's matchers all equal the alert's labels (`alertname`, `Hostname`, `gpu`...)."""
    return bool(matchers) and all(labels.get(key) == value for key, value in matchers.items())
