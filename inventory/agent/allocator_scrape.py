"""The host agent's side of the allocator exporter: every process of a deployment, its figures.

The deployment's `allocator_url` names the exporter's first port; each serving process has its
own port from there on (see inventory.agent.allocator_exporter), so the agent reads the ports
in turn until one does not answer. It reads the exporter's Prometheus text (`/metrics`) or its
JSON (`/memory_stats`, also what the simulator serves), whichever the URL names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from inventory.agent.allocator_exporter import PORT_SPAN

Fetch = Callable[[str, float], str]
_SERIES = re.compile(
    r'^torch_cuda_allocator_(\w+)\{pid="(\d+)",device="(\d+)"\}\s+([0-9.eE+-]+)\s*$', re.M
)
# Prometheus series name -> the batch's allocator key
_FROM_METRICS = {
    "reserved_bytes": "reserved_bytes",
    "allocated_bytes": "allocated_bytes",
    "inactive_split_bytes": "inactive_split_bytes",
    "largest_free_block_bytes": "largest_free_block_bytes",
}
_FROM_STATS = {
    "reserved_bytes.all.current": "reserved_bytes",
    "allocated_bytes.all.current": "allocated_bytes",
    "inactive_split_bytes.all.current": "inactive_split_bytes",
}


def parse(body: str) -> dict[int, dict]:
    """pid -> {reserved_bytes, allocated_bytes, inactive_split_bytes, largest_free_block_bytes},
    summed over the devices a process uses (a process's memory on several cards of its own)."""
    figures: dict[int, dict] = {}
    if body.lstrip().startswith("["):
        for row in json.loads(body):
            into = figures.setdefault(int(row["pid"]), {})
            for key, name in _FROM_STATS.items():
                _add(into, name, row["memory_stats"].get(key))
            _add(
                into, "largest_free_block_bytes", row.get("largest_free_block_bytes"), biggest=True
            )
        return figures
    for name, pid, _device, value in _SERIES.findall(body):
        if name in _FROM_METRICS:
            into = figures.setdefault(int(pid), {})
            _add(into, _FROM_METRICS[name], int(float(value)), biggest=name.startswith("largest"))
    return figures


def _add(into: dict, key: str, value, *, biggest: bool = False) -> None:
    if value is None:
        return
    value = int(value)
    if key not in into:
        into[key] = value
    else:
        into[key] = max(into[key], value) if biggest else into[key] + value


def read(fetch: Fetch, url: str, timeout: float = 2.0) -> dict[int, dict]:
    """Every process behind the deployment's exporter URL, on its port and the ones after it;
    raises when the first port fails."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.port is None:
        return parse(fetch(url, timeout))  # one endpoint (the simulator's sim:// URLs)
    figures = parse(fetch(url, timeout))
    failed_in_a_row = 0
    for port in range(parts.port + 1, parts.port + PORT_SPAN):
        netloc = f"{parts.hostname}:{port}"
        try:
            figures.update(parse(fetch(urlunsplit(parts._replace(netloc=netloc)), timeout)))
            failed_in_a_row = 0
        except Exception:
            # An exporter takes the next free port: one held by another program is passed
            # over (the next exporter sits past it); two in a row end the processes.
            failed_in_a_row += 1
            if failed_in_a_row == 2:
                break
    return figures
