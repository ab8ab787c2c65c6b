"""A fleet of simulated hosts: one FakeNvml per host, engine pages behind `sim://` URLs."""

from __future__ import annotations

import json
from urllib.parse import urlparse

from inventory.telemetry.engines import EngineScrapeError, ScrapeTarget
from inventory.telemetry.fake_nvml import FakeNvml
from inventory.telemetry.simulator.engine_render import (
    render_ollama_ps,
    render_sglang,
    render_tei,
    render_tgi,
    render_vllm,
)
from inventory.telemetry.simulator.host import HostSpec, SimulatedHost
from inventory.telemetry.simulator.scenarios import DEMO_EPOCH


class Fleet:
    def __init__(self, specs: list[HostSpec], seed: int, epoch: float = DEMO_EPOCH) -> None:
        self.seed = seed
        self.hosts: dict[str, SimulatedHost] = {
            spec.name: SimulatedHost(spec, seed, epoch) for spec in specs
        }
        self._nvml = {name: FakeNvml(host.state) for name, host in self.hosts.items()}

    def advance_to(self, t: float, max_step_s: float = 1.0) -> None:
        for host in self.hosts.values():
            host.advance_to(t, max_step_s)

    def nvml(self, host: str) -> FakeNvml:
        """The NVML library of a host, to hand to NvmlCollector."""
        return self._nvml[host]

    def scrape_targets(self, host: str) -> list[ScrapeTarget]:
        return [
            ScrapeTarget(
                entry["deployment_id"], entry["engine"], entry["metrics_url"], entry["model_name"]
            )
            for entry in self.hosts[host].deployment_plan()
        ]

    def fetch(self, url: str, timeout: float = 2.0) -> str:
        """The fetcher `engines.scrape` takes: sim://<host>/<deployment>/metrics and friends."""
        parsed = urlparse(url)
        host = self.hosts.get(parsed.netloc)
        parts = [p for p in parsed.path.split("/") if p]
        if parsed.scheme != "sim" or host is None or len(parts) < 2:
            raise EngineScrapeError(f"GET {url}: no such simulated endpoint")
        if parts[0] == "ollama" and parts[1:] == ["api", "ps"]:
            ollama = [r for r in host.replicas if r.spec.workload.engine == "ollama"]
            return render_ollama_ps(ollama, host.now_epoch())
        try:
            replica = host.replica(parts[0])
        except KeyError:
            raise EngineScrapeError(f"GET {url}: 404") from None
        if not replica.up:
            raise EngineScrapeError(f"GET {url}: connection refused (engine restarting)")
        if parts[1] == "memory_stats":
            return json.dumps(host.allocator_stats(parts[0]))
        if parts[1] != "metrics":
            raise EngineScrapeError(f"GET {url}: 404")
        engine = replica.spec.workload.engine
        if engine == "vllm":
            card = host.state.cards[replica.spec.cards[0]]
            return render_vllm(replica, card.total_bytes)
        if engine == "sglang":
            return render_sglang(replica)
        if engine == "tgi":
            return render_tgi(replica)
        if engine == "tei":
            return render_tei(replica)
        raise EngineScrapeError(f"GET {url}: {engine} serves no /metrics")
