"""Latency history on a host: each model's P95 and P99 over time against its SLO, with the placement
changes marked, and the P99 before and after the latest change (the field report's result)."""

from __future__ import annotations

import datetime as dt
import statistics

from django.db.models import Q
from django.utils import timezone

from console.models import AuditEntry
from inventory.models import Deployment, Host
from inventory.reports.oom_history import CHANGE_ACTION_PREFIXES, group_changes
from inventory.timeseries import queries


def placement_changes(host: Host, start: dt.datetime, end: dt.datetime) -> list[dict]:
    """The host's placement and isolation changes in the window, oldest first, one per change."""
    is_change = Q()
    for prefix in CHANGE_ACTION_PREFIXES:
        is_change |= Q(action__startswith=prefix)
    entries = AuditEntry.objects.filter(is_change, host=host, at__gte=start, at__lt=end)
    changes = group_changes(entries.select_related("host").order_by("-at")[:50])
    return [
        {
            "at": change.at,
            "label": "; ".join(sorted({entry.object_repr for entry in change.entries}))[:160],
            "by": ", ".join(change.actors) or "system",
        }
        for change in reversed(changes)
    ]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def latency_lines(host: Host, start: dt.datetime, end: dt.datetime, step_s: int) -> dict:
    """Per model on the host (its replicas, stopped ones included, as one line: a model moved
    to new cards keeps one history), the P99 per step in ms, beside its SLO."""
    deployments = list(Deployment.objects.filter(host=host).select_related("served_model"))
    model_of = {d.pk: d.served_model for d in deployments}
    rows = queries.latency_p99_series(list(model_of), start, end, step_s)
    per_model: dict[str, dict] = {}
    for row in rows:
        model = model_of[row["deployment_id"]]
        points = per_model.setdefault(
            model.name, {"slo_ms": model.p99_latency_slo_ms, "at": {}, "p95": {}}
        )
        points["at"][row["ts"]] = max(row["p99_s"] * 1000, points["at"].get(row["ts"], 0.0))
        if row["p95_s"] is not None:
            points["p95"][row["ts"]] = max(row["p95_s"] * 1000, points["p95"].get(row["ts"], 0.0))
    changes = placement_changes(host, start, end)
    latest = changes[-1]["at"] if changes else None
    lines = []
    for name, points in sorted(per_model.items()):
        times = sorted(points["at"])
        values = [round(points["at"][ts], 1) for ts in times]
        line = {
            "model": name,
            "slo_ms": points["slo_ms"],
            "times": [timezone.localtime(ts).isoformat() for ts in times],
            "p99_ms": values,
            "p95_ms": [_rounded(points["p95"].get(ts)) for ts in times],
            "before_ms": None,
            "after_ms": None,
        }
        if latest is not None:
            pairs = list(zip(times, values, strict=True))
            line["before_ms"] = _median([v for ts, v in pairs if ts < latest])
            line["after_ms"] = _median([v for ts, v in pairs if ts >= latest])
        lines.append(line)
    return {
        "lines": lines,
        "changes": [
            {**change, "at": timezone.localtime(change["at"]).isoformat()} for change in changes
        ],
        "latest_change": timezone.localtime(latest).isoformat() if latest else None,
        "latest_change_at": latest,
    }
