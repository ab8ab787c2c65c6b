"""Benchmark of the combined load-test runner against local fake endpoints.

Four models behind the simulator's endpoint server (its own process, other cores), each told
to answer in exactly ``--latency-ms`` (first token after a quarter of it, 8 tokens streamed).
The runner drives all four at once from this process, held to one core, open loop, at
``--rps`` in all. Reported: requests per second achieved over the hold phase, the measured
P99 end to end against the latency the endpoints were told to produce, and the CPU the runner
used (a share of its one core).

    python tests/bench/bench_loadtest.py [--rps 240] [--hold 20] [--latency-ms 200]
                                         [--json OUT.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from console.proposals.loadtest.plan import Api, LoadTestPlan, Phases, RequestMix, Target
from console.proposals.loadtest.results import model_summaries
from console.proposals.loadtest.runner import run_plan
from inventory.analytics.stats import percentile
from inventory.telemetry.simulator.endpoints import (
    Answer,
    FixedBehaviour,
    serve_forever,
)

SHARES = {"chat-large": 0.4, "code-medium": 0.3, "embed-small": 0.2, "phi-3-mini": 0.1}
APIS = [Api.COMPLETIONS, Api.CHAT, Api.COMPLETIONS, Api.OLLAMA]
TOKENS = 4


def _serve(latency_s: float, port_out, cores: set[int]) -> None:
    if cores:
        os.sched_setaffinity(0, cores)
    answers = {f"bench/{name}": Answer(latency_s / 4, latency_s, TOKENS) for name in SHARES}
    serve_forever(FixedBehaviour(answers), 0, port_out.put)


def run(rps: float, hold_s: float, latency_ms: float) -> dict:
    cores = sorted(os.sched_getaffinity(0))
    runner_core, server_cores = cores[0], set(cores[1:]) if len(cores) > 2 else set()
    port_out = multiprocessing.Queue()
    server = multiprocessing.Process(
        target=_serve, args=(latency_ms / 1000, port_out, server_cores), daemon=True
    )
    server.start()
    port = port_out.get(timeout=30)
    os.sched_setaffinity(0, {runner_core})
    targets = tuple(
        Target(
            name=name,
            deployment=f"{name} #{index}",
            url=f"http://127.0.0.1:{port}/bench/{name}",
            api=api,
            rate_rps=rps * share,
            rate_source="given",
            slo_ms=None,
            cards=("bench:0",),
            isolation="gpu_group",
        )
        for index, ((name, share), api) in enumerate(zip(SHARES.items(), APIS, strict=True))
    )
    plan = LoadTestPlan(
        "bench",
        targets,
        RequestMix(short_output_tokens=TOKENS, long_output_tokens=TOKENS, long_share=0.2),
        Phases(ramp_s=2.0, hold_s=hold_s, cold_start=False),
        request_timeout_s=10.0,
    )
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    wall_before = time.perf_counter()
    outcome = asyncio.run(run_plan(plan))
    wall = time.perf_counter() - wall_before
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    server.terminate()
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    requests = len(outcome.records)
    rows = model_summaries(plan, outcome)
    held = [r for r in outcome.records if plan.phase_at(r.sent_s).value == "hold"]
    done = [r.e2e_s for r in held if not r.error]
    p99_ms = percentile(done, 99) * 1000
    achieved = sum(1 for r in held if not r.error) / hold_s
    return {
        "offered_rps": rps,
        "achieved_rps": round(achieved, 1),
        "hold_s": hold_s,
        "latency_ms": latency_ms,
        "p99_ms": round(p99_ms, 2),
        "p50_ms": round(percentile(done, 50) * 1000, 2),
        "p99_over_told": round(p99_ms / latency_ms - 1, 4),
        "failed": sum(1 for r in held if r.error),
        "runner_cpu_share": round(cpu / wall, 3),
        # What one request costs the runner: on a core of its own, 1 / this is its ceiling.
        "runner_cpu_ms_per_request": round(cpu / max(1, requests) * 1000, 3),
        "load_average": round(os.getloadavg()[0], 2),
        "models": [
            {"model": r["model"], "rate_rps": r["rate_rps"], "p99_ms": r["e2e_ms"]["p99"]}
            for r in rows
        ],
        "passed": achieved >= 200 and abs(p99_ms / latency_ms - 1) <= 0.05,
    }


def table(figures: dict) -> str:
    return "\n".join(
        [
            "| offered | achieved | told | measured P50 | measured P99 | P99 off | failed "
            "| runner CPU (of 1 core) | CPU per request | load average | target |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            f"| {figures['offered_rps']:g} req/s | {figures['achieved_rps']:g} req/s "
            f"| {figures['latency_ms']:g} ms | {figures['p50_ms']:g} ms | {figures['p99_ms']:g} ms "
            f"| {figures['p99_over_told']:+.1%} | {figures['failed']} "
            f"| {figures['runner_cpu_share']:.0%} | {figures['runner_cpu_ms_per_request']:g} ms "
            f"| {figures['load_average']:g} | ≥ 200 req/s, P99 within 5%: "
            f"{'yes' if figures['passed'] else 'NO'} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rps", type=float, default=240.0)
    parser.add_argument("--hold", type=float, default=20.0)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    figures = run(args.rps, args.hold, args.latency_ms)
    print(table(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
