"""Latency history: each model's P50, P95 and P99 over time against its SLO, with the placement
changes marked, and the P99 before and after the latest change (the field report's result).

Drawn on the host page (one line per model there), on the model page (one line per host it
runs on) and on the OOM history of one host; the chart and its text table read the same dict.
"""

from __future__ import annotations

import datetime as dt
import statistics

from django.db.models import Q
from django.utils import timezone

from console.core.models import AuditEntry
from inventory.models import Deployment, Host, ServedModel
from inventory.reports.oom_history import CHANGE_ACTION_PREFIXES, group_changes
from inventory.timeseries import queries

QUANTILES = ("p50", "p95", "p99")


def placement_changes(hosts: list[Host], start: dt.datetime, end: dt.datetime) -> list[dict]:
    """These hosts' placement and isolation changes in the window, oldest first, one per
    change (and per host, so the model page can say where it happened)."""
    is_change = Q()
    for prefix in CHANGE_ACTION_PREFIXES:
        is_change |= Q(action__startswith=prefix)
    entries = AuditEntry.objects.filter(is_change, host__in=hosts, at__gte=start, at__lt=end)
    changes = group_changes(entries.select_related("host").order_by("-at")[:50])
    return [
        {
            "at": change.at,
            "host": change.host.name if change.host else "",
            "label": "; ".join(sorted({entry.object_repr for entry in change.entries}))[:160],
            "by": ", ".join(change.actors) or "system",
        }
        for change in reversed(changes)
    ]


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def _lines(
    line_of: dict[int, tuple[str, int | None]], changes: list[dict], rows: list[dict]
) -> dict:
    """Each line's worst P50/P95/P99 per step in ms (its deployments merged: a model moved to
    new cards keeps one history), and its P99 median either side of the latest change."""
    per_line: dict[str, dict] = {}
    for row in rows:
        label, slo_ms = line_of[row["deployment_id"]]
        points = per_line.setdefault(label, {"slo_ms": slo_ms, **{q: {} for q in QUANTILES}})
        for quantile in QUANTILES:
            value = row[f"{quantile}_s"]
            if value is not None:
                at = points[quantile]
                at[row["ts"]] = max(value * 1000, at.get(row["ts"], 0.0))
    latest = changes[-1]["at"] if changes else None
    lines = []
    for label, points in sorted(per_line.items()):
        times = sorted(points["p99"])
        line = {
            "model": label,
            "slo_ms": points["slo_ms"],
            "times": [timezone.localtime(ts).isoformat() for ts in times],
            "before_ms": None,
            "after_ms": None,
        }
        for quantile in QUANTILES:
            values = [points[quantile].get(ts) for ts in times]
            line[f"{quantile}_ms"] = [None if v is None else round(v, 1) for v in values]
        if latest is not None:
            pairs = list(zip(times, line["p99_ms"], strict=True))
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


def latency_lines(host: Host, start: dt.datetime, end: dt.datetime, step_s: int) -> dict:
    """One line per model on the host (its replicas, stopped ones included), beside its SLO."""
    deployments = Deployment.objects.filter(host=host).select_related("served_model")
    line_of = {d.pk: (d.served_model.name, d.served_model.p99_latency_slo_ms) for d in deployments}
    rows = queries.latency_p99_series(list(line_of), start, end, step_s)
    return _lines(line_of, placement_changes([host], start, end), rows)


def model_latency_lines(
    model: ServedModel, hosts: list[Host], start: dt.datetime, end: dt.datetime, step_s: int
) -> dict:
    """One line per host the model runs on (of those visible), with those hosts' changes."""
    deployments = Deployment.objects.filter(served_model=model, host__in=hosts).select_related(
        "host"
    )
    line_of = {d.pk: (d.host.name, model.p99_latency_slo_ms) for d in deployments}
    rows = queries.latency_p99_series(list(line_of), start, end, step_s)
    changed = sorted({d.host for d in deployments}, key=lambda host: host.name)
    return _lines(line_of, placement_changes(changed, start, end), rows)
