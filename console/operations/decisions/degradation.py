"""What to do with a card past its memory limit, in the deployment policy's priority order.

1. Shrink the KV reservation of the lowest-priority tenant to its floor (a restart with a
   smaller reservation): what it frees is the reservation given up, on this card. Enough
   is below the limit; the floor itself is how far the policy lets a reservation go.
2. If that is not enough, evict the lowest-priority tenant (stop it): it frees all it holds.
   Only a tenant less important than another on the card is evicted; the card's most
   important model is never stopped to save itself.
3. If the card still stays over its limit, refuse new loads on it until a person clears it.

Priority as the inventory has it: a lower number is more important, so the lowest priority is
the highest number; ties go to the tenant holding most.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

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
    cards: int  # tensor-parallel width: a KV change is spread over this many cards


@dataclass(frozen=True, slots=True)
class Card:
    total_bytes: int
    used_bytes: int
    tenants: tuple[Tenant, ...]


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
    kv_to_bytes: int | None = None
    frees_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Plan:
    over_limit: bool
    total_bytes: int
    used_bytes: int
    limit_bytes: int
    target_bytes: int
    projected_bytes: int
    steps: tuple[Step, ...]

    def as_json(self) -> list[dict]:
        return [asdict(step) for step in self.steps]


def _lowest_priority_first(tenants: tuple[Tenant, ...]) -> list[Tenant]:
    return sorted(tenants, key=lambda t: (-t.priority, -t.used_bytes, t.deployment_id))


def _shrink(tenant: Tenant, policy: Policy) -> Step | None:
    floor = max(policy.kv_floor_bytes, int(tenant.kv_reservation_bytes * policy.kv_floor_fraction))
    if tenant.kv_reservation_bytes <= floor:
        return None
    cards = max(1, tenant.cards)
    # Whole per-card shares: each shard gives up the same amount.
    kv_to = floor + (-floor) % cards if floor % cards else floor
    kv_to = min(kv_to, tenant.kv_reservation_bytes)
    frees = (tenant.kv_reservation_bytes - kv_to) // cards
    if frees <= 0:
        return None
    return Step(
        SHRINK_KV,
        tenant.deployment_id,
        tenant.runtime_name,
        tenant.kv_reservation_bytes,
        kv_to,
        min(frees, tenant.used_bytes),
    )


def decide(card: Card, policy: Policy = Policy()) -> Plan:
    limit = int(card.total_bytes * policy.limit_fraction)
    target = int(card.total_bytes * policy.target_fraction)
    if card.used_bytes < limit:
        return Plan(False, card.total_bytes, card.used_bytes, limit, target, card.used_bytes, ())
    order = _lowest_priority_first(card.tenants)
    steps: list[Step] = []
    projected = card.used_bytes
    if order:
        lowest = order[0]
        shrink = _shrink(lowest, policy)
        most_important = min(t.priority for t in order)
        evictable = policy.allow_evict and lowest.priority > most_important
        if shrink is not None and (projected - shrink.frees_bytes < limit or not evictable):
            steps.append(shrink)
            projected -= shrink.frees_bytes
        elif evictable:
            steps.append(
                Step(
                    EVICT, lowest.deployment_id, lowest.runtime_name, frees_bytes=lowest.used_bytes
                )
            )
            projected -= lowest.used_bytes
    if projected >= limit:
        steps.append(Step(REFUSE))
    return Plan(True, card.total_bytes, card.used_bytes, limit, target, projected, tuple(steps))
