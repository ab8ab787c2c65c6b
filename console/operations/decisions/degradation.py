"""What to do with a card past its memory limit, in the deployment policy's priority order.

The limit is the on-demand part's (inventory.analytics.memory_pressure): the preallocating
engines' pools count as theirs, the limit applies to what they leave. A step that shrinks or
stops a preallocating tenant gives its bytes to the on-demand part; one that stops an
on-demand tenant lowers what that part uses.

1. Shrink the KV reservation of the lowest-priority tenant to its floor (a restart with a
   smaller reservation): what it frees is what this card's share of the reservation gives up
   (the ledger's share: an MLA model, or TP above the KV heads, holds more than an even split
   on each card). Enough is below the limit; the floor is how far the policy lets it go.
2. If that is not enough, evict the lowest-priority tenant (stop it): it frees all it holds.
   Only a tenant less important than another on the card is evicted; the card's most
   important model is never stopped to save itself.
3. If the card still stays over its limit, refuse new loads on it until a person clears it.

Priority as the inventory has it: a lower number is more important, so the lowest priority is
the highest number; ties go to the tenant holding most.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction

from inventory.analytics.memory_pressure import CardPressure, TenantMemory, card_pressure
from inventory.telemetry.host_actions import MEM_FRACTION_RANGE

SHRINK_KV = "shrink_kv"
EVICT = "evict"
REFUSE = "refuse"


@dataclass(frozen=True, slots=True)
class Tenant:
    deployment_id: int
    runtime_name: str
    priority: int
    used_bytes: int  # what its process holds on this card now
    kv_reservation_bytes: int  # all its cards together
    # Of each byte of the reservation, what one card holds (inventory.analytics.kv): 1/TP for
    # GQA with enough KV heads, 1 for MLA; what a change of the reservation moves per card.
    kv_card_share: Fraction
    engine: str = "vllm"
    weights_per_card_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Card:
    total_bytes: int
    used_bytes: int
    tenants: tuple[Tenant, ...]
    reserved_bytes: int = 0  # the driver's (nvmlMemory_v2 reserved): nobody's to use


@dataclass(frozen=True, slots=True)
class Policy:
    limit_fraction: float = 0.95
    # What the card is expected to recover to, reported with the plan.
    target_fraction: float = 0.90
    kv_floor_fraction: float = 0.5  # of the tenant's reservation
    kv_floor_bytes: int = 0  # never shrink below this, whatever the fraction says
    allow_evict: bool = True


@dataclass(frozen=True, slots=True)
class Step:
    kind: str
    deployment_id: int | None = None
    runtime_name: str = ""
    kv_from_bytes: int | None = None
    kv_to_bytes: int | None = None  # the whole reservation after the step
    frees_bytes: int = 0
    kv_to_per_card_bytes: int | None = None  # what each card holds after it
    # How the engine is told (reload_params): vLLM's bytes per GPU, or a memory fraction.
    reload: dict | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    over_limit: bool
    total_bytes: int
    used_bytes: int
    limit_bytes: int
    target_bytes: int
    projected_bytes: int
    steps: tuple[Step, ...]
    preallocated_bytes: int = 0  # held by preallocating engines when the plan was made

    def as_json(self) -> list[dict]:
        return [asdict(step) for step in self.steps]


def _lowest_priority_first(tenants: tuple[Tenant, ...]) -> list[Tenant]:
    return sorted(tenants, key=lambda t: (-t.priority, -t.used_bytes, t.deployment_id))


def per_card(reservation_bytes: int, share: Fraction) -> int:
    """A reservation's bytes on each card, rounded up as the ledger rounds it."""
    return math.ceil(reservation_bytes * share)


def _shrink(tenant: Tenant, policy: Policy, card_total_bytes: int) -> Step | None:
    floor = max(policy.kv_floor_bytes, int(tenant.kv_reservation_bytes * policy.kv_floor_fraction))
    if tenant.kv_reservation_bytes <= floor:
        return None
    before = per_card(tenant.kv_reservation_bytes, tenant.kv_card_share)
    after = per_card(floor, tenant.kv_card_share)
    frees = min(before - after, tenant.used_bytes)
    if frees <= 0:
        return None
    reload = reload_params(
        tenant.engine,
        kv_per_card_bytes=after,
        weights_per_card_bytes=tenant.weights_per_card_bytes,
        held_after_bytes=tenant.used_bytes - frees,
        card_total_bytes=card_total_bytes,
    )
    return Step(
        SHRINK_KV,
        tenant.deployment_id,
        tenant.runtime_name,
        tenant.kv_reservation_bytes,
        floor,
        frees,
        after,
        reload,
    )


def reload_params(
    engine: str,
    *,
    kv_per_card_bytes: int,
    weights_per_card_bytes: int,
    held_after_bytes: int,
    card_total_bytes: int,
) -> dict:
    """The reload's parameter in the engine's own, per-GPU terms.

    - vLLM: `--kv-cache-memory-bytes` is the KV pool of each GPU: the per-card figure.
    - SGLang: `--mem-fraction-static` is the share of each GPU for weights and the KV pool.
    - TGI (and any other): `--cuda-memory-fraction` caps what the process takes of each GPU:
      what it holds there after the shrink.
    A fraction is rounded down to a thousandth (never more than planned) within the bounds a
    host action accepts.
    """
    if engine == "vllm":
        return {"kv_bytes": max(1, kv_per_card_bytes)}
    held = weights_per_card_bytes + kv_per_card_bytes if engine == "sglang" else held_after_bytes
    low, high = MEM_FRACTION_RANGE
    fraction = math.floor(held * 1000 / card_total_bytes) / 1000
    return {"mem_fraction": min(high, max(low, fraction))}


def _pressure(card: Card, policy: Policy, used: int, freed: dict[int, int]) -> CardPressure:
    """The card after the tenants in `freed` gave up those bytes (used is already less)."""
    tenants = [
        TenantMemory(str(t.deployment_id), t.engine, t.used_bytes - freed.get(t.deployment_id, 0))
        for t in card.tenants
    ]
    return card_pressure(
        card.total_bytes, used, tenants, policy.limit_fraction, card.reserved_bytes
    )


def _target(pressure: CardPressure, policy: Policy) -> int:
    return pressure.preallocated_bytes + int(policy.target_fraction * pressure.on_demand_bytes)


def decide(card: Card, policy: Policy = Policy()) -> Plan:
    now = _pressure(card, policy, card.used_bytes, {})
    limit, target = now.limit_bytes, _target(now, policy)

    def plan(over: bool, projected: int, steps: tuple[Step, ...]) -> Plan:
        return Plan(over, card.total_bytes, card.used_bytes, limit, target, projected, steps,
                    now.preallocated_bytes)  # fmt: skip

    if card.used_bytes < limit:
        return plan(False, card.used_bytes, ())
    order = _lowest_priority_first(card.tenants)
    steps: list[Step] = []
    projected, freed = card.used_bytes, {}
    if order:
        lowest = order[0]
        shrink = _shrink(lowest, policy, card.total_bytes)
        most_important = min(t.priority for t in order)
        evictable = policy.allow_evict and lowest.priority > most_important
        shrunk = shrink is not None and _below(
            _pressure(
                card,
                policy,
                projected - shrink.frees_bytes,
                {lowest.deployment_id: shrink.frees_bytes},
            )
        )
        if shrink is not None and (shrunk or not evictable):
            steps.append(shrink)
            projected -= shrink.frees_bytes
            freed[lowest.deployment_id] = shrink.frees_bytes
        elif evictable:
            steps.append(
                Step(
                    EVICT, lowest.deployment_id, lowest.runtime_name, frees_bytes=lowest.used_bytes
                )
            )
            projected -= lowest.used_bytes
            freed[lowest.deployment_id] = lowest.used_bytes
    if not _below(_pressure(card, policy, projected, freed)):
        steps.append(Step(REFUSE))
    return plan(True, projected, tuple(steps))


def _below(pressure: CardPressure) -> bool:
    return pressure.used_bytes < pressure.limit_bytes


def recovered(card: Card, limit_fraction: float) -> bool:
    """Whether a degraded card is back below its limit, judged as the plan judged it."""
    return _below(_pressure(card, Policy(limit_fraction=limit_fraction), card.used_bytes, {}))
