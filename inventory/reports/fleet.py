"""The fleet board's row per host: headroom, worst fragmentation, P99, OOMs, collector health.

Built with one query per figure over the whole fleet (never one per host), from the hourly
rollups of the last two hours, so the board stays fast with a thousand hosts.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from inventory.models import Event, Host
from inventory.reports.collector import collector_health
from inventory.reports.thresholds import fragmentation_thresholds

RECENT = dt.timedelta(hours=2)


@dataclass
class HostRow:
    host: Host
    cards: int
    largest_headroom_bytes: int | None  # the best single card: capacity never adds up
    headroom_card: str
    worst_fragmentation: float | None
    fragmentation_status: str | None
    p99_status: str  # green / red / unknown
    p99_detail: str
    ooms_24h: int
    collector: dict

    @property
    def problems(self) -> bool:
        return (
            self.fragmentation_status == "red"
            or self.p99_status == "red"
            or self.ooms_24h > 0
            or self.collector["stale"]
        )


def _fetch(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def fleet_rows(hosts: list[Host], now: dt.datetime | None = None) -> list[HostRow]:
    now = now or timezone.now()
    ids = [host.pk for host in hosts]
    cards = {}
    for host_id, gpu_index, total, reserved, used, frag in _fetch(
        """
        SELECT g.host_id, g.index, g.memory_total_bytes, r.reserved, r.used, r.frag
        FROM inventory_gpu g
        LEFT JOIN (
            SELECT gpu_id, max(reserved_max) AS reserved, max(used_max) AS used,
                   max(frag_index_max) AS frag
            FROM inventory_card_rollup_1h WHERE bucket > %s GROUP BY gpu_id
        ) r ON r.gpu_id = g.id
        WHERE g.host_id = ANY(%s)
        """,
        [now - RECENT, ids],
    ):
        cards.setdefault(host_id, []).append((gpu_index, total, reserved, used, frag))
    latency = {}
    for host_id, name, p99, slo in _fetch(
        """
        SELECT d.host_id, m.name, max(e.latency_p99_max), m.p99_latency_slo_ms
        FROM inventory_engine_rollup_1h e
        JOIN inventory_deployment d ON d.id = e.deployment_id
        JOIN inventory_servedmodel m ON m.id = d.served_model_id
        WHERE d.host_id = ANY(%s) AND e.bucket > %s AND d.status <> 'stopped'
        GROUP BY d.host_id, m.name, m.p99_latency_slo_ms
        """,
        [ids, now - RECENT],
    ):
        latency.setdefault(host_id, []).append((name, p99, slo))
    ooms = dict(
        Event.objects.filter(host_id__in=ids, kind=Event.Kind.OOM)
        .values("host_id")
        .annotate(n=Count("id", filter=Q(at__gte=now - dt.timedelta(hours=24))))
        .values_list("host_id", "n")
    )
    thresholds = fragmentation_thresholds()
    rows = []
    for host in hosts:
        host_cards = cards.get(host.pk, [])
        headroom = [
            (total - (reserved or 0) - used, index)
            for index, total, reserved, used, _ in host_cards
            if used is not None
        ]
        best = max(headroom, default=(None, None))
        frags = [frag for *_, frag in host_cards if frag is not None]
        worst = max(frags, default=None)
        p99_status, p99_detail = _p99(latency.get(host.pk, []))
        rows.append(
            HostRow(
                host=host,
                cards=len(host_cards),
                largest_headroom_bytes=best[0],
                headroom_card="" if best[1] is None else f"card {best[1]}",
                worst_fragmentation=worst,
                fragmentation_status=None if worst is None else thresholds.classify(worst).value,
                p99_status=p99_status,
                p99_detail=p99_detail,
                ooms_24h=ooms.get(host.pk, 0),
                collector=collector_health(getattr(host, "collector_status", None), now),
            )
        )
    return rows


def _p99(rows: list[tuple]) -> tuple[str, str]:
    measured = [(name, p99, slo) for name, p99, slo in rows if p99 is not None and slo]
    if not measured:
        return "unknown", "no latency with an SLO in the last two hours"
    over = [(name, p99, slo) for name, p99, slo in measured if p99 * 1000 > slo]
    if over:
        name, p99, slo = max(over, key=lambda row: row[1] * 1000 / row[2])
        return "red", f"{name}: P99 {p99 * 1000:.0f} ms over its {slo} ms SLO"
    return "green", f"{len(measured)} model(s) within their P99 SLO"


SORTS = {
    "name": lambda row: row.host.name,
    "headroom": lambda row: (
        -1 if row.largest_headroom_bytes is None else row.largest_headroom_bytes
    ),
    "fragmentation": lambda row: -(row.worst_fragmentation or 0),
    "ooms": lambda row: -row.ooms_24h,
    "p99": lambda row: {"red": 0, "unknown": 1, "green": 2}[row.p99_status],
    "collector": lambda row: -(row.collector["age_s"] or float("inf")),
}


def sorted_rows(rows: list[HostRow], key: str) -> list[HostRow]:
    return sorted(rows, key=SORTS.get(key, SORTS["name"]))
