"""Why a model was left out, in numbers, read off the final state of the cards.

The reason is a code with its figures (inventory.analytics.reasons), so the API's English
sentence and a page in Chinese say the same thing; the messages of every code are below.
"""

from __future__ import annotations

from console.placement.mig import free_slots, smallest_fitting_profile
from console.placement.plan import Plan
from console.placement.problem import Card, ModelRequest
from inventory.analytics.reasons import Reason, gettext_noop, ngettext_lazy, register

# Reasons name a few cards, not the whole fleet.
_CARDS_NAMED = 4

MESSAGES = register(
    {
        "placement.parts": gettext_noop("{parts}"),
        "placement.cards": ngettext_lazy("{count} card", "{count} cards"),
        "placement.headroom_note": gettext_noop(" (free after the {headroom} MiB headroom)"),
        "placement.listing_more": gettext_noop("{shown}; and {hidden} more"),
        "placement.mig_slices": gettext_noop("MIG slices"),
        "placement.card_held_alone": gettext_noop(
            "{card} held alone by {occupants} ({used} MiB used, {free} MiB free)"
        ),
        "placement.card_shared": gettext_noop(
            "{card} shared by {occupants} ({used} MiB used, {free} MiB free)"
        ),
        "placement.why_whole_card": gettext_noop(
            "whole_card policy: every model takes whole cards, so a card with a model is closed"
        ),
        "placement.why_exclusive": gettext_noop(
            "exclusive: it shares its cards with no other model"
        ),
        "placement.why_group": gettext_noop("isolation 'group': its cards are shared with no one"),
        "placement.alone_need": gettext_noop(
            "needs {cards} to itself with >= {memory} MiB free ({why})"
        ),
        "placement.alone_need_one_host": gettext_noop(
            "needs {cards} to itself with >= {memory} MiB free on one host ({why})"
        ),
        "placement.all_cards_mig": gettext_noop("{need}; all {total} cards have MIG enabled"),
        "placement.best_host_empty": gettext_noop(
            "the best host {host} has {count} such empty card(s) ({cards:comma})"
        ),
        "placement.empty_too_small": gettext_noop(
            "{count} card(s) are empty but the largest has {free} MiB free ({card}){note}"
        ),
        "placement.taken": gettext_noop("{taken} of {total} cards are taken{roomy}: {listing}"),
        "placement.taken_roomy": gettext_noop(
            " ({count} of them have enough free memory but are not empty)"
        ),
        "placement.shared_all_mig": gettext_noop(
            "needs {memory} MiB on {cards} without MIG (isolation {isolation}); "
            "all {total} cards have MIG enabled"
        ),
        "placement.closed_note": gettext_noop("; closed to sharing: {listing}"),
        "placement.all_held_alone": gettext_noop(
            "every non-MIG card is held alone by another model: {listing}"
        ),
        "placement.one_card": gettext_noop(
            "needs {memory} MiB on one card; largest free is {free} MiB ({card}){note}{closed}"
        ),
        "placement.multi_need": gettext_noop(
            "needs {gpus} cards with >= {memory} MiB free each on one host"
        ),
        "placement.multi_none_big_enough": gettext_noop(
            "{need}; no card has that much: largest free is {free} MiB ({card}){note}{closed}"
        ),
        "placement.multi_best_host": gettext_noop(
            "{need}; the best host {host} has {count} ({free_list:comma}){note}{closed}"
        ),
        "placement.card_free": gettext_noop("{card} {free} MiB free"),
        "placement.mig_none": gettext_noop(
            "needs {memory} MiB in a MIG slice (isolation 'mig'); none of the {total} cards "
            "has MIG enabled"
        ),
        "placement.mig_too_big": gettext_noop(
            "needs {memory} MiB in one MIG slice; the largest profile is {profile} "
            "({profile_memory} MiB) on {card_type}"
        ),
        "placement.mig_profile": gettext_noop(
            "{profile} ({memory} MiB, {slices} slices) on {card_type}"
        ),
        "placement.mig_held_alone": gettext_noop("{card} held alone by {occupants}"),
        "placement.mig_in_use": gettext_noop("{card} in use by {occupants}"),
        "placement.mig_free_slots": gettext_noop("{card} free slots {slots}"),
        "placement.mig_types_too_small": gettext_noop(
            "{count} MIG card(s) of types without a profile that large"
        ),
        "placement.mig_no_start": gettext_noop(
            "needs {memory} MiB in a MIG slice (smallest fitting profile: {smallest:comma}); "
            "no MIG card has a free valid start for a fitting profile: {listing}"
        ),
        "placement.mig_no_start_alone": gettext_noop(
            "needs {memory} MiB in a MIG slice on a MIG card to itself (smallest fitting "
            "profile: {smallest:comma}); no MIG card has a free valid start for a fitting "
            "profile: {listing}"
        ),
    }
)


def unplaced_reason(plan: Plan, model: ModelRequest) -> Reason:
    if model.isolation == "mig":
        return _mig_reason(plan, model)
    if plan.problem.takes_cards_alone(model):
        return _alone_reason(plan, model)
    return _shared_reason(plan, model)


def _cards_word(count: int) -> Reason:
    return Reason("placement.cards", {"count": count})


def _headroom_note(plan: Plan) -> Reason | str:
    headroom = plan.problem.policy.headroom_mib
    return Reason("placement.headroom_note", {"headroom": headroom}) if headroom else ""


def _listing(descriptions: list[Reason]) -> Reason | list[Reason]:
    shown = descriptions[:_CARDS_NAMED]
    hidden = len(descriptions) - _CARDS_NAMED
    if hidden > 0:
        return Reason("placement.listing_more", {"shown": shown, "hidden": hidden})
    return shown


def _occupants(plan: Plan, card: Card) -> str | Reason:
    names = list(card.tenants) + [plan.problem.models[m].name for m in plan.new_models[card.index]]
    return ", ".join(names) if names else Reason("placement.mig_slices")


def _held_card(plan: Plan, card: Card) -> Reason:
    code = "placement.card_held_alone" if plan.locked[card.index] else "placement.card_shared"
    free = plan.free_mib[card.index]
    return Reason(
        code,
        {
            "card": card.id,
            "occupants": _occupants(plan, card),
            "used": card.capacity_mib - free,
            "free": free,
        },
    )


def _alone_reason(plan: Plan, model: ModelRequest) -> Reason:
    problem = plan.problem
    if problem.policy.whole_card:
        why = Reason("placement.why_whole_card")
    elif model.exclusive:
        why = Reason("placement.why_exclusive")
    else:
        why = Reason("placement.why_group")
    cards = [card for card in problem.cards if not card.mig]
    need = Reason(
        "placement.alone_need_one_host" if model.gpus > 1 else "placement.alone_need",
        {"cards": _cards_word(model.gpus), "memory": model.memory_mib, "why": why},
    )
    if not cards:
        return Reason("placement.all_cards_mig", {"need": need, "total": len(problem.cards)})
    empty = [card for card in cards if plan.is_empty(card.index)]
    taken = [card for card in cards if not plan.is_empty(card.index)]
    parts: list[Reason] = [need]
    big_enough = [c for c in empty if plan.free_mib[c.index] >= model.memory_mib]
    if big_enough:  # only a multi-card model lands here: no host has enough of them
        per_host: dict[str, list[str]] = {}
        for card in big_enough:
            per_host.setdefault(card.host, []).append(card.id)
        host, ids = max(per_host.items(), key=lambda item: len(item[1]))
        parts.append(
            Reason("placement.best_host_empty", {"host": host, "count": len(ids), "cards": ids})
        )
    elif empty:
        largest = max(empty, key=lambda c: plan.free_mib[c.index])
        parts.append(
            Reason(
                "placement.empty_too_small",
                {
                    "count": len(empty),
                    "free": plan.free_mib[largest.index],
                    "card": largest.id,
                    "note": _headroom_note(plan),
                },
            )
        )
    if taken:
        roomy = sum(plan.free_mib[c.index] >= model.memory_mib for c in taken)
        parts.append(
            Reason(
                "placement.taken",
                {
                    "taken": len(taken),
                    "total": len(cards),
                    "roomy": Reason("placement.taken_roomy", {"count": roomy}) if roomy else "",
                    "listing": _listing([_held_card(plan, card) for card in taken]),
                },
            )
        )
    return Reason("placement.parts", {"parts": parts})


def _shared_reason(plan: Plan, model: ModelRequest) -> Reason:
    problem = plan.problem
    cards = [card for card in problem.cards if not card.mig]
    if not cards:
        return Reason(
            "placement.shared_all_mig",
            {
                "memory": model.memory_mib,
                "cards": _cards_word(model.gpus),
                "isolation": repr(model.isolation),
                "total": len(problem.cards),
            },
        )
    open_cards = [card for card in cards if not plan.locked[card.index]]
    closed = [_held_card(plan, card) for card in cards if plan.locked[card.index]]
    closed_note = Reason("placement.closed_note", {"listing": _listing(closed)}) if closed else ""
    if not open_cards:
        held = [_held_card(plan, card) for card in cards]
        return Reason("placement.all_held_alone", {"listing": _listing(held)})
    largest = max(open_cards, key=lambda c: plan.free_mib[c.index])
    largest_figures = {
        "free": plan.free_mib[largest.index],
        "card": largest.id,
        "note": _headroom_note(plan),
        "closed": closed_note,
    }
    if model.gpus == 1:
        return Reason("placement.one_card", {"memory": model.memory_mib, **largest_figures})
    per_host: dict[str, list[Card]] = {}
    for card in open_cards:
        if plan.free_mib[card.index] >= model.memory_mib:
            per_host.setdefault(card.host, []).append(card)
    need = Reason("placement.multi_need", {"gpus": model.gpus, "memory": model.memory_mib})
    if not per_host:
        return Reason("placement.multi_none_big_enough", {"need": need, **largest_figures})
    host, fitting = max(per_host.items(), key=lambda item: len(item[1]))
    free_list = [
        Reason("placement.card_free", {"card": c.id, "free": plan.free_mib[c.index]})
        for c in fitting
    ]
    return Reason(
        "placement.multi_best_host",
        {
            "need": need,
            "host": host,
            "count": len(fitting),
            "free_list": free_list,
            "note": _headroom_note(plan),
            "closed": closed_note,
        },
    )


def _mig_reason(plan: Plan, model: ModelRequest) -> Reason:
    problem = plan.problem
    mig_cards = [card for card in problem.cards if card.mig_type is not None]
    if not mig_cards:
        return Reason(
            "placement.mig_none", {"memory": model.memory_mib, "total": len(problem.cards)}
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
        return Reason(
            "placement.mig_too_big",
            {
                "memory": model.memory_mib,
                "profile": largest.name,
                "profile_memory": largest.memory_mib,
                "card_type": name,
            },
        )
    smallest = [
        Reason(
            "placement.mig_profile",
            {
                "profile": p.name,
                "memory": p.memory_mib,
                "slices": p.memory_slices,
                "card_type": name,
            },
        )
        for name, p in fitting.items()
    ]
    alone = problem.takes_cards_alone(model)
    states = []
    for card in mig_cards:
        assert card.mig_type is not None
        if card.mig_type.name not in fitting:
            continue
        if plan.locked[card.index]:
            occupants = {"card": card.id, "occupants": _occupants(plan, card)}
            states.append(Reason("placement.mig_held_alone", occupants))
        elif alone and not plan.is_empty(card.index):
            occupants = {"card": card.id, "occupants": _occupants(plan, card)}
            states.append(Reason("placement.mig_in_use", occupants))
        else:
            slots = free_slots(card.mig_type, plan.slot_masks[card.index])
            states.append(
                Reason("placement.mig_free_slots", {"card": card.id, "slots": str(list(slots))})
            )
    too_small = len(mig_cards) - len(states)
    if too_small:
        states.append(Reason("placement.mig_types_too_small", {"count": too_small}))
    return Reason(
        "placement.mig_no_start_alone" if alone else "placement.mig_no_start",
        {"memory": model.memory_mib, "smallest": smallest, "listing": _listing(states)},
    )
