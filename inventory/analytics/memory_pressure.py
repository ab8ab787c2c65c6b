"""What "the card is about to run out of memory" means, per kind of tenant (pure).

NVML's used memory over total is the wrong measure on a card whose engines preallocate:
vLLM, SGLang and TGI take their KV pool when they start (vLLM's --gpu-memory-utilization,
SGLang's --mem-fraction-static, TGI's --cuda-memory-fraction), so what their processes hold is
set by their settings and barely moves with traffic. A card the engine-settings gate approved
at 0.95 of its memory would sit at a 95% rule for good, and a degradation policy would shrink
or stop a healthy tenant. So the rule is split by tenant kind:

- **On demand.** Whatever allocates as it goes (Ollama, llama.cpp, a training or batch job, any
  process no preallocating deployment owns) can still run the card out. Its part of the card is
  what the preallocating tenants leave of the usable memory (NVML's total less what the driver
  reserves, nvmlMemory_v2 ``reserved``); the limit applies to that part: the card is over when
  NVML's used memory passes ``preallocated + limit x (total - reserved - preallocated)``.
- **Preallocated pools.** A preallocating engine runs out inside its own pool: its KV usage at
  the limit while it preempts requests or its queue grows (a ``kv_pressure`` event).

A card with no preallocating tenant seen (none placed, or their processes not attributed) is
judged by NVML alone, as before: the preallocated part is only what is measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Engines that take their KV pool up front, whatever the traffic.
PREALLOCATING_ENGINES = frozenset({"vllm", "sglang", "tgi"})


def preallocates(engine: str) -> bool:
    return engine in PREALLOCATING_ENGINES


@dataclass(frozen=True, slots=True)
class TenantMemory:
    name: str
    engine: str
    held_bytes: int  # what its processes hold on this card now (NVML, per process)
    kv_usage: float | None = None  # the engine's own KV usage, 0..1; None: not reported
    kv_pressure: bool = False  # a kv_pressure event (preemptions, growing queue) just now


@dataclass(frozen=True, slots=True)
class CardPressure:
    total_bytes: int
    used_bytes: int
    preallocated_bytes: int  # held by preallocating tenants, at most what NVML says is used
    limit_fraction: float
    full_pools: tuple[str, ...]  # preallocating tenants whose own pool is at the limit
    reserved_bytes: int = 0  # the driver's and firmware's, never anyone's to use

    @property
    def on_demand_bytes(self) -> int:
        """The part of the card's usable memory the preallocating tenants leave."""
        return self.total_bytes - self.reserved_bytes - self.preallocated_bytes

    @property
    def on_demand_used_bytes(self) -> int:
        return self.used_bytes - self.preallocated_bytes

    @property
    def on_demand_fraction(self) -> float:
        if self.on_demand_bytes <= 0:
            return 1.0 if self.on_demand_used_bytes > 0 else 0.0
        return self.on_demand_used_bytes / self.on_demand_bytes

    @property
    def limit_bytes(self) -> int:
        """NVML's used memory at which the on-demand part reaches the limit."""
        return self.preallocated_bytes + int(self.limit_fraction * self.on_demand_bytes)

    @property
    def on_demand_over(self) -> bool:
        return self.used_bytes > self.limit_bytes


def card_pressure(
    total_bytes: int,
    used_bytes: int,
    tenants: Iterable[TenantMemory],
    limit_fraction: float,
    reserved_bytes: int = 0,
) -> CardPressure:
    tenants = tuple(tenants)
    held = sum(max(0, t.held_bytes) for t in tenants if preallocates(t.engine))
    full = tuple(
        t.name
        for t in tenants
        if preallocates(t.engine)
        and t.kv_pressure
        and t.kv_usage is not None
        and t.kv_usage >= limit_fraction
    )
    return CardPressure(
        total_bytes=total_bytes,
        used_bytes=used_bytes,
        preallocated_bytes=min(held, max(0, used_bytes)),
        limit_fraction=limit_fraction,
        full_pools=full,
        reserved_bytes=max(0, reserved_bytes),
    )


def on_demand_share_limit(preallocated_fraction: float, limit_fraction: float) -> float:
    """The most of the card that on-demand tenants may claim beside preallocated ones before
    their peak crosses the rule: the limit of what the preallocated part leaves."""
    return limit_fraction * max(0.0, 1.0 - preallocated_fraction)
