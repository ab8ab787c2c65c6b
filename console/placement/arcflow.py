"""Arc-flow model for one-dimensional bin packing (Valerio de Carvalho, 1999), solved by CP-SAT.

Nodes are the fill levels 0..W of a bin. An item arc (d, d + w) puts an item of size w into a bin
filled to d; loss arcs (d, W) close a bin. A bin is a path from 0 to W, and a packing is a flow
whose value is the number of bins. Its LP relaxation is as strong as the Gilmore-Gomory
column-generation bound, which is why it proves optimality where an assignment model cannot.

Two reductions keep the graph small:
  - sizes are divided by their GCD and the capacity rounded down to that unit, which changes
    nothing (sums of multiples of g fit under C exactly when they fit under floor(C/g)*g);
    GPU models sized in whole GiB on 80 GB cards become a graph of ~80 nodes;
  - item arcs follow decreasing sizes: an arc for size w only starts at a level reachable by
    items of size >= w, and at most `count(w)` of them follow each other.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from console.placement.solver_params import configure

# Above this many arcs the arc-flow model stops paying for itself against the assignment model.
ARC_LIMIT = 50_000


@dataclass(frozen=True)
class Item:
    size: int
    weight: int  # value of placing the item, used when not everything fits


@dataclass(frozen=True)
class ArcFlowGraph:
    capacity: int
    scale: int
    sizes: tuple[int, ...]  # distinct scaled sizes, largest first
    item_arcs: tuple[tuple[int, int, int], ...]  # (tail, head, index into sizes)
    nodes: tuple[int, ...]


@dataclass(frozen=True)
class ArcFlowAnswer:
    bins: list[list[int]]  # item indices per bin
    optimal: bool
    bins_lower_bound: int | None  # proven bound on bins for packing every item, when asked to


def build_graph(sizes: Sequence[int], capacity: int, arc_limit: int) -> ArcFlowGraph | None:
    """The reduced graph, or None if it would have more than `arc_limit` arcs."""
    positive = [size for size in sizes if size > 0]
    if not positive or len(positive) != len(sizes) or max(positive) > capacity:
        return None
    scale = math.gcd(*positive)
    width = capacity // scale
    counts = Counter(size // scale for size in positive)
    distinct = sorted(counts, reverse=True)
    reachable = {0}
    arcs: set[tuple[int, int, int]] = set()
    for kind, size in enumerate(distinct):
        reached: set[int] = set()
        for start in reachable:
            level = start
            for _ in range(counts[size]):
                if level + size > width:
                    break
                arcs.add((level, level + size, kind))
                level += size
                reached.add(level)
            if len(arcs) > arc_limit:
                return None
        reachable |= reached
    return ArcFlowGraph(
        capacity=width,
        scale=scale,
        sizes=tuple(distinct),
        item_arcs=tuple(sorted(arcs)),
        nodes=tuple(sorted(reachable | {width})),
    )


def solve_arc_flow(
    graph: ArcFlowGraph,
    items: Sequence[Item],
    bin_count: int,
    place_all: bool,
    hint_bins: Sequence[Sequence[int]],
    deadline: float,
    bins_at_least: int = 0,
) -> ArcFlowAnswer | None:
    """Pack `items` (whose sizes built `graph`) into at most `bin_count` bins.

    With place_all, every item must be packed and the number of bins is minimised (a known lower
    bound, `bins_at_least`, spares the solver proving it again). Otherwise
    the total weight packed is maximised first and the number of bins second. Returns None when
    no packing was found by the deadline (a time.perf_counter() value).
    """
    width = graph.capacity
    kind_of_size = {size: kind for kind, size in enumerate(graph.sizes)}
    item_kind = [kind_of_size[item.size // graph.scale] for item in items]
    classes = Counter((item_kind[i], item.weight) for i, item in enumerate(items))

    model = cp_model.CpModel()
    kind_counts = Counter(item_kind)
    flow = [
        model.new_int_var(0, kind_counts[kind], f"item_{tail}_{head}_{kind}")
        for tail, head, kind in graph.item_arcs
    ]
    loss_tails = [node for node in graph.nodes if 0 < node < width]
    loss = {node: model.new_int_var(0, bin_count, f"loss_{node}") for node in loss_tails}
    outgoing: dict[int, list[cp_model.IntVar]] = defaultdict(list)
    incoming: dict[int, list[cp_model.IntVar]] = defaultdict(list)
    per_kind: dict[int, list[cp_model.IntVar]] = defaultdict(list)
    for variable, (tail, head, kind) in zip(flow, graph.item_arcs, strict=True):
        outgoing[tail].append(variable)
        incoming[head].append(variable)
        per_kind[kind].append(variable)
    for node, variable in loss.items():
        outgoing[node].append(variable)
    for node in loss_tails:
        model.add(sum(incoming[node]) == sum(outgoing[node]))
    bins = sum(outgoing[0])
    model.add(bins <= bin_count)

    placed = {
        key: model.new_int_var(0, count, f"placed_{key[0]}_{key[1]}")
        for key, count in classes.items()
    }
    for kind in range(len(graph.sizes)):
        model.add(sum(per_kind[kind]) == sum(v for k, v in placed.items() if k[0] == kind))
    if place_all:
        for key, count in classes.items():
            model.add(placed[key] == count)
        model.add(bins >= bins_at_least)
        model.minimize(bins)
    else:
        value = sum(weight * variable for (_, weight), variable in placed.items())
        model.maximize(value * (bin_count + 1) - bins)

    _add_hint(model, graph, items, hint_bins, flow, loss, placed, item_kind)
    solver = cp_model.CpSolver()
    configure(solver, deadline)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    arc_flow = {
        arc: solver.value(variable)
        for arc, variable in zip(graph.item_arcs, flow, strict=True)
        if solver.value(variable)
    }
    placed_counts = {key: solver.value(v) for key, v in placed.items()}
    packed = _decompose(graph, arc_flow)
    bound = math.ceil(solver.best_objective_bound - 1e-6) if place_all else None
    return ArcFlowAnswer(
        bins=_assign_items(packed, items, item_kind, placed_counts),
        optimal=status == cp_model.OPTIMAL,
        bins_lower_bound=bound,
    )


def _add_hint(
    model: cp_model.CpModel,
    graph: ArcFlowGraph,
    items: Sequence[Item],
    hint_bins: Sequence[Sequence[int]],
    flow: list[cp_model.IntVar],
    loss: dict[int, cp_model.IntVar],
    placed: dict[tuple[int, int], cp_model.IntVar],
    item_kind: list[int],
) -> None:
    """Turn a packing into the flow that represents it: each bin, largest item first, is a path."""
    arc_index = {arc: i for i, arc in enumerate(graph.item_arcs)}
    arc_flow = Counter[int]()
    loss_flow = Counter[int]()
    placed_hint = Counter[tuple[int, int]]()
    for contents in hint_bins:
        level = 0
        for item in sorted(contents, key=lambda i: item_kind[i]):
            kind = item_kind[item]
            arc_flow[arc_index[(level, level + graph.sizes[kind], kind)]] += 1
            level += graph.sizes[kind]
            placed_hint[(kind, items[item].weight)] += 1
        if 0 < level < graph.capacity:
            loss_flow[level] += 1
    for i, variable in enumerate(flow):
        model.add_hint(variable, arc_flow[i])
    for node, variable in loss.items():
        model.add_hint(variable, loss_flow[node])
    for key, variable in placed.items():
        model.add_hint(variable, placed_hint[key])


def _decompose(graph: ArcFlowGraph, arc_flow: dict[tuple[int, int, int], int]) -> list[list[int]]:
    """Split the flow into paths from 0; each path is a bin, given as the kinds it holds.

    Flow conservation guarantees that a path reaching a level can leave it: by an item arc with
    flow left, or else by the loss arc that closes the bin.
    """
    out_arcs: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for arc in arc_flow:
        out_arcs[arc[0]].append(arc)
    remaining = dict(arc_flow)
    bins: list[list[int]] = []
    while any(remaining[arc] for arc in out_arcs[0]):
        level, kinds = 0, []
        while (arc := next((a for a in out_arcs[level] if remaining[a]), None)) is not None:
            remaining[arc] -= 1
            kinds.append(arc[2])
            level = arc[1]
        bins.append(kinds)
    return bins


def _assign_items(
    packed: list[list[int]],
    items: Sequence[Item],
    item_kind: list[int],
    placed_counts: dict[tuple[int, int], int],
) -> list[list[int]]:
    """Items of one size are interchangeable in a bin: hand out the placed ones, heaviest first."""
    queues: dict[int, list[int]] = defaultdict(list)
    by_class: dict[tuple[int, int], list[int]] = defaultdict(list)
    for index, item in enumerate(items):
        by_class[(item_kind[index], item.weight)].append(index)
    for (kind, weight), members in sorted(by_class.items(), key=lambda kv: -kv[0][1]):
        queues[kind].extend(members[: placed_counts.get((kind, weight), 0)])
    for queue in queues.values():
        queue.reverse()
    return [[queues[kind].pop() for kind in kinds] for kinds in packed]
