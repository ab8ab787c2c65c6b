"""Why a model was left out, in numbers, read off the final state of the cards."""

from __future__ import annotations

from console.placement.mig import free_slots, smallest_fitting_profile
from console.placement.plan import Plan
from console.placement.problem import Card, ModelRequest

# Reasons name a few cards, not the whole fleet.
_CARDS_NAMED = 4


def unplaced_reason(plan: Plan, model: ModelRequest) -> str:
    if model.isolation == "mig":
        return _mig_reason(plan, model)
    if plan.problem.takes_cards_alone(model):
        return _alone_reason(plan, model)
    return _shared_reason(plan, model)


def _cards_word(count: int) -> str:
    return "1 card" if count == 1 else f"{count} cards"


def _headroom_note(plan: Plan) -> str:
    headroom = plan.problem.policy.headroom_mib
    return f" (free after the {headroom} MiB headroom)" if headroom else ""


def _listing(descriptions: list[str]) -> str:
    shown = "; ".join(descriptions[:_CARDS_NAMED])
    hidden = len(descriptions) - _CARDS_NAMED
    return f"{shown}; and {hidden} more" if hidden > 0 else shown


def _occupants(plan: Plan, card: Card) -> str:
    names = list(card.tenants) + [plan.problem.models[m].name for m in plan.new_models[card.index]]
    return ", ".join(names) if names else "MIG slices"


def _held_card(plan: Plan, card: Card) -> str:
    used = card.capacity_mib - plan.free_mib[card.index]
    state = "held alone" if plan.locked[card.index] else "shared"
    return (
        f"{card.id} {state} by {_occupants(plan, card)} "
        f"({used} MiB used, {plan.free_mib[card.index]} MiB free)"
    )


def _alone_reason(plan: Plan, model: ModelRequest) -> str:
    problem = plan.problem
    if problem.policy.whole_card:
        why = "whole_card policy: every model takes whole cards, so a card with a model is closed"
    elif model.exclusive:
        why = "exclusive: it shares its cards with no other model"
    else:
        why = "isolation 'group': its cards are shared with no one"
    cards = [card for card in problem.cards if not card.mig]
    need = (
        f"needs {_cards_word(model.gpus)} to itself with >= {model.memory_mib} MiB free"
        f"{' on one host' if model.gpus > 1 else ''} ({why})"
    )
    if not cards:
        return f"{need}; all {len(problem.cards)} cards have MIG enabled"
    empty = [card for card in cards if plan.is_empty(card.index)]
    taken = [card for card in cards if not plan.is_empty(card.index)]
    parts = [need]
    big_enough = [c for c in empty if plan.free_mib[c.index] >= model.memory_mib]
    if big_enough:  # only a multi-card model lands here: no host has enough of them
        per_host: dict[str, list[str]] = {}
        for card in big_enough:
            per_host.setdefault(card.host, []).append(card.id)
        host, ids = max(per_host.items(), key=lambda item: len(item[1]))
        parts.append(f"the best host {host} has {len(ids)} such empty card(s) ({', '.join(ids)})")
    elif empty:
        largest = max(empty, key=lambda c: plan.free_mib[c.index])
        parts.append(
            f"{len(empty)} card(s) are empty but the largest has "
            f"{plan.free_mib[largest.index]} MiB free ({largest.id}){_headroom_note(plan)}"
        )
    if taken:
        roomy = sum(plan.free_mib[c.index] >= model.memory_mib for c in taken)
        closed = f" ({roomy} of them have enough free memory but are not empty)" if roomy else ""
        parts.append(
            f"{len(taken)} of {len(cards)} cards are taken{closed}: "
            + _listing([_held_card(plan, card) for card in taken])
        )
    return "; ".join(parts)


def _shared_reason(plan: Plan, model: ModelRequest) -> str:
    problem = plan.problem
    cards = [card for card in problem.cards if not card.mig]
    if not cards:
        return (
            f"needs {model.memory_mib} MiB on {_cards_word(model.gpus)} without MIG "
            f"(isolation {model.isolation!r}); all {len(problem.cards)} cards have MIG enabled"
        )
    open_cards = [card for card in cards if not plan.locked[card.index]]
    closed = [_held_card(plan, card) for card in cards if plan.locked[card.index]]
    closed_note = f"; closed to sharing: {_listing(closed)}" if closed else ""
    if not open_cards:
        held = [_held_card(plan, card) for card in cards]
        return "every non-MIG card is held alone by another model: " + _listing(held)
    if model.gpus == 1:
        largest = max(open_cards, key=lambda c: plan.free_mib[c.index])
        return (
            f"needs {model.memory_mib} MiB on one card; largest free is "
            f"{plan.free_mib[largest.index]} MiB ({largest.id}){_headroom_note(plan)}{closed_note}"
        )
    per_host: dict[str, list[Card]] = {}
    for card in open_cards:
        if plan.free_mib[card.index] >= model.memory_mib:
            per_host.setdefault(card.host, []).append(card)
    need = f"needs {model.gpus} cards with >= {model.memory_mib} MiB free each on one host"
    if not per_host:
        largest = max(open_cards, key=lambda c: plan.free_mib[c.index])
        return (
            f"{need}; no card has that much: largest free is {plan.free_mib[largest.index]} MiB "
            f"({largest.id}){_headroom_note(plan)}{closed_note}"
        )
    host, fitting = max(per_host.items(), key=lambda item: len(item[1]))
    free_list = ", ".join(f"{c.id} {plan.free_mib[c.index]} MiB free" for c in fitting)
    return (
        f"{need}; the best host {host} has {len(fitting)} ({free_list})"
        f"{_headroom_note(plan)}{closed_note}"
    )


def _mig_reason(plan: Plan, model: ModelRequest) -> str:
    problem = plan.problem
    mig_cards = [card for card in problem.cards if card.mig_type is not None]
    if not mig_cards:
        return (
            f"needs {model.memory_mib} MiB in a MIG slice (isolation 'mig'); none of the "
            f"{len(problem.cards)} cards has MIG enabled"
        )
    types = {card.mig_type.name: card.mig_type for card in mig_cards if card.mig_type}
    fitting = {
        name: profile
        for name, card_type in types.items()
        if (profile := smallest_fitting_profile(card_type, model.memory_mib)) is not None
    }
    if not fitting:
        name, largest = max(
            ((name, p) for name, t in types.items() for p in t.profiles),
            key=lambda item: item[1].memory_mib,
        )
        return (
            f"needs {model.memory_mib} MiB in one MIG slice; the largest profile is "
            f"{largest.name} ({largest.memory_mib} MiB) on {name}"
        )
    smallest = ", ".join(
        f"{p.name} ({p.memory_mib} MiB, {p.memory_slices} slices) on {name}"
        for name, p in fitting.items()
    )
    alone = problem.takes_cards_alone(model)
    states = []
    for card in mig_cards:
        assert card.mig_type is not None
        if card.mig_type.name not in fitting:
            continue
        if plan.locked[card.index]:
            states.append(f"{card.id} held alone by {_occupants(plan, card)}")
        elif alone and not plan.is_empty(card.index):
            states.append(f"{card.id} in use by {_occupants(plan, card)}")
        else:
            slots = free_slots(card.mig_type, plan.slot_masks[card.index])
            states.append(f"{card.id} free slots {list(slots)}")
    too_small = len(mig_cards) - len(states)
    if too_small:
        states.append(f"{too_small} MIG card(s) of types without a profile that large")
    to_itself = " on a MIG card to itself" if alone else ""
    return (
        f"needs {model.memory_mib} MiB in a MIG slice{to_itself} (smallest fitting profile: "
        f"{smallest}); no MIG card has a free valid start for a fitting profile: "
        + _listing(states)
    )
