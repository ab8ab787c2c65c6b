"""Placement diagrams: each card a column, each model a block to scale (pure, no Django).

Built from a placement request and its answer (the solver's or the inventory's current one),
so the host page and a proposal's before/after draw the same way. Heights are fractions of
the tallest card, so cards of different sizes compare at a glance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from console.placement.mig import UnknownMigCardType, canonical_profile_name, mig_card_type


@dataclass(frozen=True)
class Block:
    label: str
    mib: int
    kind: str  # "model", "existing" (memory in use by others), "headroom", "free", "stranded"
    top: float  # fraction of the tallest card, from the top of the column
    height: float


@dataclass
class Column:
    card_id: str
    host: str
    total_mib: int
    scale: float  # this card's height as a fraction of the tallest card
    blocks: list[Block] = field(default_factory=list)
    mig_slots: int | None = None  # memory slots of a MIG card, drawn as a ruler
    note: str = ""  # a code: "mig_not_catalogued" when the MIG card type has no catalogue entry


def _stack(column: Column, parts: list[tuple[str, int, str]]) -> None:
    offset = 0.0
    for label, mib, kind in parts:
        if mib <= 0:
            continue
        height = column.scale * mib / column.total_mib
        column.blocks.append(Block(label, mib, kind, offset, height))
        offset += height


def build(request: dict, answer: dict) -> list[Column]:
    gpus = {gpu["id"]: gpu for gpu in request["gpus"]}
    models = {model["name"]: model for model in request.get("models", [])}
    headroom = int(request.get("policy", {}).get("headroom_mib", 0))
    alone = {
        model["name"]
        for model in request.get("models", [])
        if model.get("exclusive") or model.get("isolation") == "group"
    } | set(request.get("exclusive_existing", []))
    placed: dict[str, list[str]] = {}
    for assignment in answer.get("assignments", []):
        for card in assignment["gpus"]:
            placed.setdefault(card, []).append(assignment["model"])
    tallest = max((gpu["memory_mib"] for gpu in gpus.values()), default=1)
    columns = []
    for card in answer.get("cards", []):
        gpu = gpus[card["id"]]
        column = Column(card["id"], gpu["host"], gpu["memory_mib"], gpu["memory_mib"] / tallest)
        if gpu.get("mig"):
            _mig_column(column, gpu, card)
        else:
            parts = [
                (name, models[name]["memory_mib"], "model") for name in placed.get(card["id"], [])
            ]
            existing = gpu.get("used_mib", 0)
            if existing:
                label = ", ".join(gpu.get("models", [])) or "in use"
                parts.insert(0, (label, existing, "existing"))
            free = max(0, gpu["memory_mib"] - sum(mib for _, mib, _ in parts))
            reserve = min(headroom, free)
            occupants = placed.get(card["id"], []) + list(gpu.get("models", []))
            # Memory beside a model that shares with no one is stranded: nothing may use it.
            free_kind = "stranded" if any(name in alone for name in occupants) else "free"
            parts += [("headroom", reserve, "headroom"), (free_kind, free - reserve, free_kind)]
            _stack(column, parts)
        columns.append(column)
    return columns


def _raw_mig_column(column: Column, card: dict) -> None:
    """A MIG card whose type has no catalogue entry: its instances as NVML reported them (start
    slot, slots, memory), on a ruler as long as the furthest slot any of them reaches."""
    column.note = "mig_not_catalogued"
    pieces = card.get("mig_slices", [])
    slots = max((p["start"] + p.get("size_slots", 1) for p in pieces), default=1)
    column.mig_slots = slots
    slot = column.scale / slots
    for entry in pieces:
        size = entry.get("size_slots", 1)
        label = f"{entry.get('model') or 'unused'} ({entry['profile']})"
        kind = "model" if entry.get("model") else "free"
        column.blocks.append(
            Block(label, entry.get("memory_mib", 0), kind, entry["start"] * slot, size * slot)
        )


def _mig_column(column: Column, gpu: dict, card: dict) -> None:
    """MIG instances on their start slots; slots with no instance drawn as free."""
    try:
        card_type = mig_card_type(gpu.get("type", ""), gpu["memory_mib"])
    except UnknownMigCardType:
        _raw_mig_column(column, card)
        return
    column.mig_slots = card_type.memory_slices
    slot = column.scale / card_type.memory_slices
    taken = set()
    for entry in card.get("mig_slices", []):
        profile = card_type.profile(canonical_profile_name(entry["profile"]))
        if profile is None:
            continue
        size = profile.memory_slices
        taken.update(range(entry["start"], entry["start"] + size))
        label = f"{entry.get('model') or 'unused'} ({profile.name})"
        kind = "model" if entry.get("model") else "free"
        column.blocks.append(
            Block(label, profile.memory_mib, kind, entry["start"] * slot, size * slot)
        )
    for index in range(card_type.memory_slices):
        if index not in taken:
            column.blocks.append(Block(f"slot {index} free", 0, "free", index * slot, slot))


@dataclass(frozen=True)
class DrawnBlock:
    label: str
    mib: int
    kind: str
    y: int
    height: int


@dataclass(frozen=True)
class DrawnColumn:
    card_id: str
    x: int
    height: int
    total_mib: int
    blocks: list[DrawnBlock]
    slot_lines: list[int]  # y of each MIG memory-slot boundary
    note: str = ""


@dataclass(frozen=True)
class Drawing:
    width: int
    height: int
    columns: list[DrawnColumn]
    models: list[tuple[str, int]]  # each model once, with its memory per card


COLUMN_PX, CARD_PX, TITLE_PX = 100, 260, 24


def to_drawing(columns: list[Column]) -> Drawing:
    """Pixel geometry for an SVG: columns side by side, blocks stacked from the top."""
    drawn, models = [], {}
    for position, column in enumerate(columns):
        blocks = [
            DrawnBlock(
                block.label,
                block.mib,
                block.kind,
                TITLE_PX + round(block.top * CARD_PX),
                max(1, round(block.height * CARD_PX)),
            )
            for block in column.blocks
        ]
        for block in column.blocks:
            if block.kind == "model":
                models.setdefault(block.label, block.mib)
        lines = []
        if column.mig_slots:
            step = column.scale * CARD_PX / column.mig_slots
            lines = [TITLE_PX + round(step * slot) for slot in range(1, column.mig_slots)]
        drawn.append(
            DrawnColumn(
                column.card_id,
                position * COLUMN_PX,
                round(column.scale * CARD_PX),
                column.total_mib,
                blocks,
                lines,
                column.note,
            )
        )
    return Drawing(
        max(1, len(columns)) * COLUMN_PX, TITLE_PX + CARD_PX + 4, drawn, sorted(models.items())
    )
