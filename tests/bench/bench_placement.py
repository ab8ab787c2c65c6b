"""Benchmark of the placement solver.

1. OR-Library Falkenauer sets (u120, u250, u500, u1000; capacity 150): bins against the best
   known value in the file and time per instance, for method "greedy" and method "auto". Every
   answer is checked (all items placed, no card over capacity) before it is counted.
2. A fleet of 128 cards on 16 hosts with 200 models: time of the greedy answer.

Both go through solve(), the same entry point as the command and the API.

    python tests/bench/bench_placement.py [--sets u120,u250] [--limit 10] [--first N]
                                          [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from console.placement import solve
from console.placement.bounds import volume_bound
from console.placement.greedy import greedy_plan
from console.placement.schema import validate_problem
from tests.console.placement.orlib import BinPackingInstance, read_orlib

SET_FILES = {"u120": "binpack1.txt", "u250": "binpack2.txt", "u500": "binpack3.txt"}
SET_FILES["u1000"] = "binpack4.txt"
FIXTURES = REPO / "tests" / "fixtures" / "binpacking"
H100_MIB = 81559


def bin_packing_request(instance: BinPackingInstance, method: str, limit: float) -> dict:
    # Any-fit packings leave at most one bin half empty, so 2 * L1 + 1 cards are always enough.
    card_count = 2 * volume_bound(instance.sizes, instance.capacity) + 1
    return {
        "gpus": [
            {"id": f"bin:{i}", "host": "bin", "memory_mib": instance.capacity}
            for i in range(card_count)
        ],
        "models": [
            {"name": f"item{i}", "memory_mib": size} for i, size in enumerate(instance.sizes)
        ],
        "policy": {"method": method, "time_limit_s": limit},
    }


def check_packing(instance: BinPackingInstance, answer: dict) -> None:
    if answer["unplaced"]:
        raise AssertionError(f"{instance.name}: {len(answer['unplaced'])} items unplaced")
    load: dict[str, int] = {}
    for assignment in answer["assignments"]:
        (card,) = assignment["gpus"]
        load[card] = load.get(card, 0) + instance.sizes[int(assignment["model"][4:])]
    if len(answer["assignments"]) != len(instance.sizes) or max(load.values()) > instance.capacity:
        raise AssertionError(f"{instance.name}: invalid packing")
    if len(load) != answer["cards_used"]:
        raise AssertionError(f"{instance.name}: cards_used does not match the packing")


def run_bin_packing(sets: list[str], limit: float, first: int | None) -> list[dict[str, Any]]:
    rows = []
    for set_name in sets:
        for instance in read_orlib(FIXTURES / SET_FILES[set_name])[:first]:
            row: dict[str, Any] = {
                "set": set_name,
                "instance": instance.name,
                "best_known": instance.best_known,
            }
            for method in ("greedy", "auto"):
                request = bin_packing_request(instance, method, limit)
                started = time.perf_counter()
                answer = solve(request)
                seconds = time.perf_counter() - started
                check_packing(instance, answer)
                row[method] = {
                    "bins": answer["cards_used"],
                    "seconds": round(seconds, 3),
                    "optimal": answer["optimal"],
                    "lower_bound": answer["lower_bound"],
                    "formulation": answer["formulation"],
                }
            rows.append(row)
            print(
                f"{instance.name}: best known {instance.best_known}, greedy "
                f"{row['greedy']['bins']}, auto {row['auto']['bins']} "
                f"({row['auto']['seconds']} s, optimal {row['auto']['optimal']})",
                file=sys.stderr,
                flush=True,
            )
    return rows


def fleet_request(seed: int = 7, method: str = "greedy", limit: float = 10) -> dict:
    """16 hosts x 8 H100-80GB, 200 models of mixed sizes, card counts and isolation."""
    rng = random.Random(seed)
    gpus = [
        {
            "id": f"host{h:02d}:{c}",
            "host": f"host{h:02d}",
            "type": "H100-SXM5-80GB",
            "memory_mib": H100_MIB,
        }
        for h in range(16)
        for c in range(8)
    ]
    sizes_gib = [2, 4, 6, 8, 10, 12, 16, 20, 24, 30, 40, 48, 60, 70]
    models = []
    for i in range(200):
        isolation = rng.choices(["any", "mps", "group"], weights=[80, 15, 5])[0]
        models.append(
            {
                "name": f"model{i:03d}",
                "memory_mib": rng.choice(sizes_gib) * 1024,
                "gpus": rng.choices([1, 2, 4], weights=[85, 10, 5])[0],
                "exclusive": rng.random() < 0.05,
                "priority": rng.randint(1, 3),
                "isolation": isolation,
            }
        )
    return {
        "gpus": gpus,
        "models": models,
        "policy": {"method": method, "time_limit_s": limit, "headroom_mib": 2048},
    }


def run_fleet(limit: float, repeats: int = 20) -> dict[str, Any]:
    request = fleet_request()
    problem = validate_problem(request)
    greedy_ms = []
    for _ in range(repeats):
        started = time.perf_counter()
        greedy_plan(problem)
        greedy_ms.append((time.perf_counter() - started) * 1000)
    solve_ms = []
    for _ in range(repeats):
        started = time.perf_counter()
        greedy_answer = solve(request)
        solve_ms.append((time.perf_counter() - started) * 1000)
    started = time.perf_counter()
    auto_answer = solve(fleet_request(method="auto", limit=limit))
    auto_seconds = time.perf_counter() - started
    return {
        "cards": len(request["gpus"]),
        "hosts": 16,
        "models": len(request["models"]),
        "greedy_plan_ms_median": round(statistics.median(greedy_ms), 1),
        "greedy_plan_ms_max": round(max(greedy_ms), 1),
        "greedy_solve_ms_median": round(statistics.median(solve_ms), 1),
        "greedy_solve_ms_max": round(max(solve_ms), 1),
        "greedy_cards_used": greedy_answer["cards_used"],
        "greedy_placed": len(greedy_answer["assignments"]),
        "auto_cards_used": auto_answer["cards_used"],
        "auto_placed": len(auto_answer["assignments"]),
        "auto_lower_bound": auto_answer["lower_bound"],
        "auto_optimal": auto_answer["optimal"],
        "auto_method": auto_answer["method"],
        "auto_seconds": round(auto_seconds, 2),
    }


def bin_packing_table(rows: list[dict[str, Any]], limit: float) -> str:
    lines = [
        "| set | instances | method | reaches best known | below best known | proven optimal "
        "| bins over best known | mean s | max s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    groups = [*sorted({row["set"] for row in rows}, key=list(SET_FILES).index), "all"]
    for group in groups:
        members = [r for r in rows if group in ("all", r["set"])]
        for method in ("greedy", "auto"):
            label = f"{method} ({limit:g} s)" if method == "auto" else method
            results = [(r[method], r["best_known"]) for r in members]
            reached = sum(res["bins"] <= best for res, best in results)
            below = sum(res["bins"] < best for res, best in results)
            proven = sum(res["optimal"] for res, _ in results)
            over = sum(res["bins"] - best for res, best in results)
            seconds = [res["seconds"] for res, _ in results]
            lines.append(
                f"| {group} | {len(members)} | {label} | {reached}/{len(members)} | {below} "
                f"| {proven} | {over:+d} | {statistics.mean(seconds):.2f} | {max(seconds):.2f} |"
            )
    return "\n".join(lines)


def fleet_table(fleet: dict[str, Any]) -> str:
    return "\n".join(
        [
            "| fleet | greedy_plan ms (median / max) | solve(greedy) ms (median / max) "
            "| greedy cards / placed | auto cards / placed / lower bound | auto s |",
            "|---|---|---|---|---|---|",
            f"| {fleet['cards']} cards, {fleet['hosts']} hosts, {fleet['models']} models "
            f"| {fleet['greedy_plan_ms_median']} / {fleet['greedy_plan_ms_max']} "
            f"| {fleet['greedy_solve_ms_median']} / {fleet['greedy_solve_ms_max']} "
            f"| {fleet['greedy_cards_used']} / {fleet['greedy_placed']} "
            f"| {fleet['auto_cards_used']} / {fleet['auto_placed']} / {fleet['auto_lower_bound']}"
            f" | {fleet['auto_seconds']} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(SET_FILES), help="e.g. u120,u250")
    parser.add_argument("--limit", type=float, default=10.0, help="auto time limit, seconds")
    parser.add_argument("--first", type=int, default=None, help="only the first N per set")
    parser.add_argument("--skip-fleet", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = [s for s in sets if s not in SET_FILES]
    if unknown:
        parser.error(f"unknown set(s) {', '.join(unknown)}; known: {', '.join(SET_FILES)}")

    rows = run_bin_packing(sets, args.limit, args.first)
    print(f"## Falkenauer bin packing (auto limit {args.limit:g} s)\n")
    print(bin_packing_table(rows, args.limit))
    fleet = None
    if not args.skip_fleet:
        fleet = run_fleet(args.limit)
        print("\n## Fleet: greedy time\n")
        print(fleet_table(fleet))
    if args.json:
        args.json.write_text(
            json.dumps({"limit_s": args.limit, "bin_packing": rows, "fleet": fleet}, indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
