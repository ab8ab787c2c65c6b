"""Reader for the OR-Library bin packing files (Falkenauer's u120/u250/u500/u1000 sets).

File layout: the number of problems; then for each problem an id line, a line
``capacity item_count best_known`` and ``item_count`` item sizes, one per line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BinPackingInstance:
    name: str
    capacity: int
    sizes: tuple[int, ...]
    best_known: int


def parse_orlib(text: str) -> list[BinPackingInstance]:
    tokens = text.split()
    if not tokens:
        raise ValueError("empty OR-Library file")
    problem_count = int(tokens[0])
    position = 1
    instances: list[BinPackingInstance] = []
    for _ in range(problem_count):
        name = tokens[position]
        capacity, item_count, best_known = (int(t) for t in tokens[position + 1 : position + 4])
        position += 4
        sizes = tuple(int(t) for t in tokens[position : position + item_count])
        if len(sizes) != item_count:
            raise ValueError(f"{name}: expected {item_count} item sizes, found {len(sizes)}")
        position += item_count
        instances.append(BinPackingInstance(name, capacity, sizes, best_known))
    return instances


def read_orlib(path: str | Path) -> list[BinPackingInstance]:
    return parse_orlib(Path(path).read_text())
