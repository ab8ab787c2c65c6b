"""Collector CPU per poll, and host-side memory over an accelerated simulated run.

    python tests/bench/bench_collector.py                 # both, 10-minute memory run
    python tests/bench/bench_collector.py --minutes 1     # shorter memory run
    python tests/bench/bench_collector.py --skip-memory   # CPU figure only

1. CPU per poll of an 8-card host, 4 processes per card, NVML time excluded.
   Method: poll once against the fake NVML while recording every call and its answer; then
   poll N times against a replay stub whose functions only look the recorded answer up
   (table lookup, no NVML work). Time N polls (process CPU time), then time the stub alone by
   replaying the recorded call sequence N times in a loop, and subtract: what is left is the
   collector's own CPU. A cross-check times N polls against the live fake and subtracts the
   time measured inside the fake's functions.
2. Memory: the host agent's own code (Agent, one HostRuntime per host: collector, process
   mapping, sampler, outbox) collecting the demo fleet (5 hosts) on an accelerated clock, 1 Hz
   polls, engine and allocator scrapes every 5 s, 60 s batches published into a counting
   sink. RSS and tracemalloc's traced memory are sampled every --sample-every real seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from inventory.agent.runtime import Agent
from inventory.agent.sources import FleetSimulator
from inventory.telemetry.collector import NvmlCollector
from inventory.telemetry.fake_nvml import FakeHostState, FakeNvml, FakeProcess
from inventory.telemetry.simulator.catalogue import MIB, build_card, gpu_type

MIDNIGHT = 1_796_083_200.0  # 2026-12-01T00:00:00Z

# --- 1. CPU per poll ----------------------------------------------------------------------


def eight_card_state() -> FakeHostState:
    gpu = gpu_type("H100-SXM5-80GB")
    cards = []
    for index in range(8):
        card = build_card(gpu, "bench", index)
        card.processes = [
            FakeProcess(10_000 + 10 * index + n, "/usr/bin/python3", (4_000 + n) * MIB)
            for n in range(4)
        ]
        cards.append(card)
    return FakeHostState(cards)


class RecordingNvml:
    """Forwards to the fake and writes down every call and its answer."""

    def __init__(self, nvml: FakeNvml) -> None:
        self._nvml = nvml
        self.calls: list[tuple[str, tuple]] = []
        self.answers: dict[tuple[str, tuple], object] = {}

    def __getattr__(self, name: str):
        target = getattr(self._nvml, name)
        if not name.startswith("nvml") or not callable(target):
            return target

        def record(*args):
            answer = target(*args)
            self.calls.append((name, args))
            self.answers[(name, args)] = answer
            return answer

        return record


class ReplayNvml:
    """Answers every recorded call by table lookup: the cheapest NVML there can be."""

    def __init__(self, recording: RecordingNvml) -> None:
        for attribute in dir(recording._nvml):
            if attribute.startswith(("NVML", "nvmlMemory", "nvmlEventType")):
                setattr(self, attribute, getattr(recording._nvml, attribute))
        by_function: dict[str, dict[tuple, object]] = {}
        for (name, args), answer in recording.answers.items():
            by_function.setdefault(name, {})[args] = answer
        for name, table in by_function.items():
            setattr(self, name, self._lookup(table))
        self.nvmlInit = lambda: None

    @staticmethod
    def _lookup(table):
        def lookup(*args):
            return table[args]

        return lookup


def cpu_per_poll(polls: int) -> dict[str, float]:
    state = eight_card_state()
    recording = RecordingNvml(FakeNvml(state))
    NvmlCollector(recording, "bench", watch_xid=False).poll()  # discovery
    recording.calls.clear()
    NvmlCollector(recording, "bench", watch_xid=False).poll()
    warm = NvmlCollector(recording, "bench", watch_xid=False)
    warm.poll()
    recording.calls.clear()
    warm.poll()  # a steady-state poll: the call sequence to replay
    sequence = list(recording.calls)
    replay = ReplayNvml(recording)
    collector = NvmlCollector(replay, "bench", watch_xid=False)
    collector.poll()
    assert sum(len(c.processes) for c in collector.poll().cards) == 32

    gc.collect()
    started = time.process_time()
    for _ in range(polls):
        collector.poll()
    with_stub = (time.process_time() - started) / polls

    bound = [(getattr(replay, name), args) for name, args in sequence]
    started = time.process_time()
    for _ in range(polls):
        for function, args in bound:
            function(*args)
    stub_only = (time.process_time() - started) / polls

    # cross-check on the live fake: subtract the time spent inside its functions
    live = FakeNvml(eight_card_state())
    inside = [0.0]
    timed = _TimedNvml(live, inside)
    live_collector = NvmlCollector(timed, "bench", watch_xid=False)
    live_collector.poll()
    inside[0] = 0.0
    started = time.process_time()
    for _ in range(polls):
        live_collector.poll()
    live_total = (time.process_time() - started) / polls
    return {
        "calls_per_poll": len(sequence),
        "poll_with_stub_ms": with_stub * 1e3,
        "stub_only_ms": stub_only * 1e3,
        "collector_ms": (with_stub - stub_only) * 1e3,
        "live_poll_ms": live_total * 1e3,
        "live_inside_fake_ms": inside[0] / polls * 1e3,
        "live_collector_ms": (live_total - inside[0] / polls) * 1e3,
    }


class _TimedNvml:
    def __init__(self, nvml: FakeNvml, inside: list[float]) -> None:
        self._nvml, self._inside = nvml, inside

    def __getattr__(self, name: str):
        target = getattr(self._nvml, name)
        if not name.startswith("nvml") or not callable(target):
            return target
        inside = self._inside
        clock = time.process_time

        def timed(*args):
            started = clock()
            try:
                return target(*args)
            finally:
                inside[0] += clock() - started

        return timed


# --- 2. memory over an accelerated run ----------------------------------------------------


class CountingSink:
    def __init__(self) -> None:
        self.batches = 0
        self.bytes = 0

    def __call__(self, batch: dict) -> None:
        self.bytes += len(json.dumps(batch))
        self.batches += 1


def rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / MIB


def memory_run(
    minutes: float, speed: float, sample_every: float, trace: bool, start_hour: float
) -> list[tuple]:
    """The host agent itself (Agent, HostRuntime, SimulatedSource) on an accelerated clock."""
    real_start = time.monotonic()
    base = MIDNIGHT + start_hour * 3600.0

    def clock() -> float:
        return base + (time.monotonic() - real_start) * speed

    simulator = FleetSimulator(seed=0, clock=clock)
    sink = CountingSink()
    agent = Agent(simulator.source_for, sink, outbox_max=100)
    for name, host in simulator.fleet.hosts.items():
        deployments = [
            {**entry, "runtime_name": entry["deployment_id"]} for entry in host.deployment_plan()
        ]
        agent.apply_plan(
            {"host": name, "collector": "simulated", "sample_interval_s": 1.0,
             "flush_interval_s": 60.0, "deployments": deployments}
        )  # fmt: skip
    if trace:
        tracemalloc.start()
    next_sample = 0.0
    series = []
    while (elapsed := time.monotonic() - real_start) < minutes * 60:
        if elapsed >= next_sample:
            gc.collect()
            traced = tracemalloc.get_traced_memory()[0] / MIB if trace else float("nan")
            sim_hours = (clock() - MIDNIGHT) / 3600
            series.append((elapsed, sim_hours, rss_mib(), traced, sink.batches))
            print(
                f"  t={elapsed:6.0f}s sim={sim_hours:6.2f}h rss={series[-1][2]:7.1f} MiB "
                f"traced={traced:7.2f} MiB batches={sink.batches}",
                flush=True,
            )
            next_sample += sample_every
        wait = agent.run_once()
        if wait > 0:
            time.sleep(min(wait / speed, 0.05))
    if trace:
        tracemalloc.stop()
    return series


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=5000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--speed", type=float, default=144.0, help="simulated s per real s")
    parser.add_argument("--sample-every", type=float, default=30.0)
    parser.add_argument("--start-hour", type=float, default=10.0, help="simulated start (UTC h)")
    parser.add_argument("--no-tracemalloc", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    report: dict = {}

    figures = cpu_per_poll(args.polls)
    report["cpu_per_poll"] = figures
    print("collector CPU per poll, 8 cards x 4 processes, NVML time excluded:")
    print(f"  NVML calls per steady-state poll        {figures['calls_per_poll']}")
    print(f"  poll against replay stub                {figures['poll_with_stub_ms']:.3f} ms")
    print(f"  replay stub alone (same calls)          {figures['stub_only_ms']:.3f} ms")
    print(
        f"  collector own CPU                       {figures['collector_ms']:.3f} ms (target <= 2)"
    )
    print(
        f"  cross-check, live fake: poll {figures['live_poll_ms']:.3f} ms, inside fake "
        f"{figures['live_inside_fake_ms']:.3f} ms, collector {figures['live_collector_ms']:.3f} ms"
    )
    if args.skip_memory:
        _write(args.json, report)
        return
    print(f"memory over {args.minutes:g} min at {args.speed:g}x (demo fleet, 5 hosts):")
    series = memory_run(
        args.minutes, args.speed, args.sample_every, not args.no_tracemalloc, args.start_hour
    )
    settled = [row for row in series if row[0] >= min(120.0, series[-1][0] / 3)]
    if len(settled) >= 2:
        rss_growth = settled[-1][2] - settled[0][2]
        traced_growth = settled[-1][3] - settled[0][3]
        print(
            f"  after warm-up: RSS {settled[0][2]:.1f} -> {settled[-1][2]:.1f} MiB "
            f"({rss_growth:+.1f}), traced {settled[0][3]:.2f} -> {settled[-1][3]:.2f} MiB "
            f"({traced_growth:+.2f}); simulated up to {series[-1][1]:.1f} h"
        )
    report["memory"] = {
        "minutes": args.minutes,
        "speed_asked": args.speed,
        "simulated_hours": series[-1][1] - series[0][1],
        "series": [
            {"elapsed_s": e, "sim_hour": h, "rss_mib": r, "traced_mib": t, "batches": b}
            for e, h, r, t, b in series
        ],
    }
    _write(args.json, report)


def _write(path: Path | None, report: dict) -> None:
    if path:
        path.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
