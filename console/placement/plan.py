"""The state of the cards while models are placed, and the placement rules.

Every method (greedy, arc-flow, CP-SAT) builds its answer through Plan.place / Plan.place_mig,
so each answer is checked against the same rules:
  - a card's models never use more than its memory minus the headroom;
  - a model that takes its cards alone (exclusive, isolation "group", or the whole_card policy)
    gets cards with nothing on them and nobody joins it;
  - a multi-card model gets `gpus` distinct cards of one host;
  - isolation "mig" models go into a MIG slice on a MIG card, all others onto non-MIG cards
    (a process on a MIG-enabled card can only run inside an instance);
  - MIG slices sit on valid start slots and never overlap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from console.placement.mig import choose_slice, occupied_mask
from console.placement.mig_profiles import MigProfile
from console.placement.problem import ModelRequest, Problem


class PlacementRuleError(ValueError):
    """A method tried to build an answer that breaks a placement rule (a bug, not bad input)."""


@dataclass(frozen=True)
class Assignment:
    model: int
    cards: tuple[int, ...]
    mig_profile: MigProfile | None = None
    mig_start: int | None = None


class Plan:
    def __init__(self, problem: Problem):
        self.problem = problem
        cards = problem.cards
        self.free_mib = [card.free_mib for card in cards]
        self._had_tenants = [card.has_tenants for card in cards]
        self.new_models: list[list[int]] = [[] for _ in cards]
        self.locked = [False] * len(cards)
        self.slot_masks = [occupied_mask(card.mig_slices) for card in cards]
        self.assignments: dict[int, Assignment] = {}

    def is_empty(self, card: int) -> bool:
        return not self._had_tenants[card] and not self.new_models[card]

    def can_share(self, model: ModelRequest, card: int) -> bool:
        """Whether a non-MIG model fits on the card now (memory and isolation)."""
        # Cheapest test first: greedy asks this for every card and most are too full.
        if self.free_mib[card] < model.memory_mib or self.locked[card]:
            return False
        if self.problem.cards[card].mig or model.isolation == "mig":
            return False
        return not self.problem.takes_cards_alone(model) or self.is_empty(card)

    def mig_slice_for(self, model: ModelRequest, card: int) -> tuple[MigProfile, int] | None:
        """The slice a MIG model would get on the card now, or None if it cannot go there."""
        spec = self.problem.cards[card]
        if spec.mig_type is None or model.isolation != "mig" or self.locked[card]:
            return None
        if self.problem.takes_cards_alone(model) and not self.is_empty(card):
            return None
        return choose_slice(spec.mig_type, self.slot_masks[card], model.memory_mib)

    def place(self, model: ModelRequest, cards: Sequence[int]) -> None:
        self._check_unplaced(model)
        if len(cards) != model.gpus or len(set(cards)) != len(cards):
            raise PlacementRuleError(f"{model.name} needs {model.gpus} distinct cards: {cards}")
        if len({self.problem.cards[card].host for card in cards}) != 1:
            raise PlacementRuleError(f"{model.name} must get cards of one host: {cards}")
        for card in cards:
            if not self.can_share(model, card):
                card_id = self.problem.cards[card].id
                raise PlacementRuleError(f"{model.name} cannot go on {card_id}")
        alone = self.problem.takes_cards_alone(model)
        for card in cards:
            self.free_mib[card] -= model.memory_mib
            self.new_models[card].append(model.index)
            self.locked[card] = alone
        self.assignments[model.index] = Assignment(model.index, tuple(cards))

    def place_mig(self, model: ModelRequest, card: int, profile: MigProfile, start: int) -> None:
        self._check_unplaced(model)
        spec = self.problem.cards[card]
        valid = (
            spec.mig_type is not None
            and model.isolation == "mig"
            and profile in spec.mig_type.profiles
            and not profile.media_extensions
            and profile.memory_mib >= model.memory_mib
            and start in profile.starts
            and not profile.slot_mask(start) & self.slot_masks[card]
            and not self.locked[card]
            and (self.is_empty(card) or not self.problem.takes_cards_alone(model))
        )
        if not valid:
            raise PlacementRuleError(
                f"{model.name} cannot take {profile.name}@{start} on {spec.id}"
            )
        self.slot_masks[card] |= profile.slot_mask(start)
        self.new_models[card].append(model.index)
        self.locked[card] = self.problem.takes_cards_alone(model)
        self.assignments[model.index] = Assignment(model.index, (card,), profile, start)

    def _check_unplaced(self, model: ModelRequest) -> None:
        if model.index in self.assignments:
            raise PlacementRuleError(f"{model.name} is placed twice")

    def cards_used(self) -> int:
        return sum(not self.is_empty(card) for card in range(len(self.problem.cards)))

    def placed(self) -> set[int]:
        return set(self.assignments)
