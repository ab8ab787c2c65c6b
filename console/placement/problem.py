"""The validated, internal shape of a placement problem (see schema.py for the JSON form)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from console.placement.mig_profiles import MigCardType, MigProfile

Method = Literal["greedy", "exact", "auto"]
Isolation = Literal["any", "group", "mps", "mig"]


@dataclass(frozen=True)
class MigSlice:
    """A GPU instance on a MIG card: a profile on a start slot of the memory-slice axis."""

    profile: MigProfile
    start: int
    model: str | None


@dataclass(frozen=True)
class Card:
    index: int
    id: str
    host: str
    memory_mib: int
    used_mib: int
    mig: bool
    tenants: tuple[str, ...]
    mig_slices: tuple[MigSlice, ...]
    mig_type: MigCardType | None
    headroom_mib: int

    @property
    def capacity_mib(self) -> int:
        """Memory a shared card offers to models: the headroom is kept back against OOMs."""
        return self.memory_mib - self.headroom_mib

    @property
    def free_mib(self) -> int:
        return max(0, self.capacity_mib - self.used_mib)

    @property
    def has_tenants(self) -> bool:
        """Existing models (or MIG instances) make a card in use before anything is placed."""
        return bool(self.tenants) or bool(self.mig_slices)


@dataclass(frozen=True)
class ModelRequest:
    index: int
    name: str
    memory_mib: int
    gpus: int
    exclusive: bool
    priority: int
    isolation: Isolation


@dataclass(frozen=True)
class Policy:
    method: Method
    time_limit_s: float
    headroom_mib: int
    whole_card: bool


@dataclass(frozen=True)
class Problem:
    cards: tuple[Card, ...]
    models: tuple[ModelRequest, ...]
    policy: Policy

    def takes_cards_alone(self, model: ModelRequest) -> bool:
        """Whether no other model may share the model's cards."""
        return model.exclusive or model.isolation == "group" or self.policy.whole_card

    @cached_property
    def cards_by_host(self) -> dict[str, tuple[int, ...]]:
        hosts: dict[str, list[int]] = {}
        for card in self.cards:
            hosts.setdefault(card.host, []).append(card.index)
        return {host: tuple(indices) for host, indices in hosts.items()}

    @cached_property
    def bin_capacity(self) -> int | None:
        """The common free memory per card when the problem is plain one-dimensional bin
        packing: single-card shareable models that fit on identical empty non-MIG cards. None
        otherwise."""
        models_are_items = self.models and all(
            model.gpus == 1
            and model.memory_mib > 0
            and model.isolation in ("any", "mps")
            and not self.takes_cards_alone(model)
            for model in self.models
        )
        if not models_are_items:
            return None
        free = {card.free_mib for card in self.cards}
        cards_are_bins = len(free) == 1 and not any(c.mig or c.has_tenants for c in self.cards)
        if not cards_are_bins:
            return None
        capacity = free.pop()
        # A model no card can hold is not an item of the packing: the general model says why
        # it stays unplaced.
        return capacity if all(m.memory_mib <= capacity for m in self.models) else None

    @cached_property
    def priority_levels(self) -> tuple[int, ...]:
        """Distinct priorities, most important (lowest number) first."""
        return tuple(sorted({model.priority for model in self.models}))
