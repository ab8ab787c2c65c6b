"""What the guided proposal form shows beside its fields: host search with each host's best
card, the chosen host's cards drawn as its placement, the KV advisor's recommendation, and the
isolation modes' honest limits."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.utils.translation import gettext_lazy as _

from console.placement import diagram
from console.proposals.gate_checks import concurrency_of
from console.proposals.models import Proposal
from inventory.analytics.headroom import largest_headroom
from inventory.analytics.kv import recommended_kv_reservation_bytes, whole_requests
from inventory.analytics.units import format_gib
from inventory.models import Deployment, Gpu, Host, MigSlice
from inventory.placement_state import current_placement
from inventory.reports.headroom import recent_card_headroom

HOST_MATCHES = 20


@dataclass(frozen=True)
class HostMatch:
    name: str
    cards: int
    best_card: str  # "" when nothing was measured in the last two hours
    headroom_bytes: int | None


def search_hosts(query: str, now: dt.datetime, limit: int = HOST_MATCHES) -> list[HostMatch]:
    """Hosts whose name holds the query, each with its best single card's headroom."""
    hosts = list(
        Host.objects.filter(name__icontains=query.strip())
        .order_by("name")
        .values_list("pk", "name")[:limit]
    )
    by_host: dict[int, list] = {}
    for card in recent_card_headroom([pk for pk, _name in hosts], now):
        by_host.setdefault(card.peaks.host_id, []).append(card)
    matches = []
    for pk, name in hosts:
        cards = by_host.get(pk, [])
        best = largest_headroom((card.headroom_bytes, card) for card in cards)
        matches.append(
            HostMatch(
                name,
                len(cards),
                f"{name}:{best[1].peaks.index}" if best else "",
                best[0] if best else None,
            )
        )
    return matches


@dataclass(frozen=True)
class CardChoice:
    gpu: Gpu
    x: int  # where its column sits in the drawing, so its checkbox lines up under it
    partitioned: bool


@dataclass(frozen=True)
class CardPicker:
    host: Host
    drawing: diagram.Drawing
    cards: list[CardChoice]
    slices: list[MigSlice]


def card_picker(host: Host) -> CardPicker:
    """The host's cards as its placement draws them, each with its place in the drawing."""
    drawing = diagram.to_drawing(diagram.build(*current_placement(host)))
    x_of = {column.card_id: column.x for column in drawing.columns}
    gpus = list(host.gpus.select_related("host").order_by("index"))
    return CardPicker(
        host,
        drawing,
        [
            CardChoice(gpu, x_of.get(str(gpu), 0), gpu.mig_mode == Gpu.MigMode.ENABLED)
            for gpu in gpus
        ],
        list(
            MigSlice.objects.filter(gpu__host=host)
            .select_related("gpu__host")
            .order_by("gpu__index", "start_slot")
        ),
    )


@dataclass(frozen=True)
class KvRecommendation:
    recommended_bytes: int
    formula: str
    source: str

    @property
    def gib(self) -> str:
        return f"{self.recommended_bytes / 1024**3:.3f}"


def kv_recommendation(proposal: Proposal, now: dt.datetime) -> KvRecommendation | None:
    """The advisor's reservation: P95 (or peak) concurrency x tokens x bytes a token x
    (1 + buffer), from the deployment's engine history or the concurrency the author states."""
    per_token = proposal.served_model.effective_kv_bytes_per_token
    tokens = proposal.kv_tokens_per_request
    concurrency = concurrency_of(proposal, now)
    if not per_token or not tokens or concurrency is None:
        return None
    at_peak = proposal.kv_reservation_basis == Deployment.KvBasis.PEAK and concurrency.peak
    sized, label = (concurrency.peak, "peak") if at_peak else (concurrency.p95, "P95")
    buffer = settings.KV_BUFFER
    recommended = recommended_kv_reservation_bytes(sized, tokens, per_token, buffer)
    return KvRecommendation(
        recommended,
        f"{label} concurrency {sized:.1f} -> {whole_requests(sized)} requests x {tokens:,} "
        f"tokens x {per_token:,} B/token x {1 + buffer:.2f} = {format_gib(recommended)}",
        concurrency.source,
    )


@dataclass(frozen=True)
class IsolationNote:
    mode: str
    label: str
    note: str
    runbook_slug: str


_NOTES = {
    Deployment.Isolation.GPU_GROUP: (
        _(
            "Each model on its own cards: a clear fault boundary and no shared SMs. Whole "
            "cards strand the memory a model does not use."
        ),
        "choosing-isolation",
    ),
    Deployment.Isolation.MIG: (
        _(
            "Hardware partitions with their own memory and SMs on fixed profiles and start "
            "slots; repartitioning needs the instances being destroyed idle."
        ),
        "choosing-isolation",
    ),
    Deployment.Isolation.MPS: (
        _(
            "Not hard isolation: one client's fatal fault takes down every client on the GPU, "
            "and the server refuses new clients until they exit. The thread percentage caps "
            "SMs only."
        ),
        "mps-not-hard-isolation",
    ),
    Deployment.Isolation.TIME_SLICING: (
        _(
            "No memory or SM isolation: models take turns and each raises the others' tail "
            "latency under load."
        ),
        "choosing-isolation",
    ),
}


def isolation_notes() -> list[IsolationNote]:
    return [
        IsolationNote(mode.value, mode.label, *_NOTES[mode])
        for mode in Deployment.Isolation
        if mode in _NOTES
    ]
