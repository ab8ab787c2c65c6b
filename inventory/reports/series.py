"""A host's charts: card x time heatmaps of memory use and fragmentation, and each
deployment's memory on each card over time, at a step that suits the window."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from inventory.models import Deployment, Host
from inventory.reports.latency import latency_lines
from inventory.timeseries import queries

WINDOWS = {
    "1h": (dt.timedelta(hours=1), 60),
    "24h": (dt.timedelta(hours=24), 15 * 60),
    "7d": (dt.timedelta(days=7), 2 * 3600),
    "30d": (dt.timedelta(days=30), 6 * 3600),
}
GIB = 1024**3


def host_charts(host: Host, window: str, now: dt.datetime | None = None) -> dict:
    span, step = WINDOWS[window]
    now = now or timezone.now()
    start = now - span
    source = queries.choose_source(start, step, now)
    gpus = list(host.gpus.order_by("index"))
    by_id = {gpu.pk: gpu for gpu in gpus}
    rows = queries.card_series(list(by_id), start, now, step, source)
    times = sorted({row["ts"] for row in rows})
    column = {ts: i for i, ts in enumerate(times)}
    used = [[None] * len(times) for _ in gpus]
    frag = [[None] * len(times) for _ in gpus]
    row_of = {gpu.pk: i for i, gpu in enumerate(gpus)}
    for row in rows:
        i, j = row_of[row["gpu_id"]], column[row["ts"]]
        total = row["total"] or by_id[row["gpu_id"]].memory_total_bytes
        if row["used_max"] is not None and total:
            # Peak use in the step as a share of the card: the figure that predicts an OOM.
            used[i][j] = round(100 * row["used_max"] / total, 1)
        if row["frag_index_max"] is not None:
            frag[i][j] = round(row["frag_index_max"], 3)
    return {
        "window": window,
        "step_s": step,
        "source": source.name,
        "times": [timezone.localtime(ts).isoformat() for ts in times],
        "cards": [f"card {gpu.index}" for gpu in gpus],
        "used_pct": used,
        "fragmentation": frag,
        "deployments": deployment_lines(host, by_id, start, now, step, source),
        "latency": latency_lines(host, start, now, step),
        "time_zone": timezone.get_current_timezone_name(),
    }


def deployment_lines(host, gpus_by_id, start, end, step, source) -> list[dict]:
    """Each deployment's peak memory per card per step (its processes summed; PIDs change)."""
    rows = queries.deployment_memory_series(list(gpus_by_id), start, end, step, source)
    names = dict(Deployment.objects.filter(host=host).values_list("pk", "served_model__name"))
    lines: dict[tuple[int, int], dict] = {}
    for row in rows:
        gpu_id, deployment_id, used = row["gpu_id"], row["deployment_id"], row["used_max"]
        line = lines.setdefault(
            (gpu_id, deployment_id),
            {
                "label": f"{names.get(deployment_id, deployment_id)} on card "
                f"{gpus_by_id[gpu_id].index}",
                "times": [],
                "used_gib": [],
            },
        )
        line["times"].append(timezone.localtime(row["ts"]).isoformat())
        line["used_gib"].append(None if used is None else round(used / GIB, 2))
    return list(lines.values())
