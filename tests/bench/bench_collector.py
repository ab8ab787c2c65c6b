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
3. Polls taken vs due with every real-host signal source on: an 8-card host through the real
   NVML code path (NvmlSource, the collector, the agent's sampling thread) against the fake
   NVML, 0.5 s polls in real time for --signals-seconds; 8 engine logs written to by a writer
   thread (a vLLM OOM traceback now and then), the kernel log (kmsg records with Xids), the
   MPS control daemon asked by its thread through the fake control binary, process exits and
   restarts every few seconds. Agent CPU per poll: the sampling thread's CPU time per tick,
   plus the control binary's processes (children's CPU) per poll.
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
        self.events: dict[str, int] = {}

    def __call__(self, batch: dict) -> None:
        self.bytes += len(json.dumps(batch))
        self.batches += 1
        for event in batch.get("events", ()):
            self.events[event["kind"]] = self.events.get(event["kind"], 0) + 1


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


# --- 3. polls taken vs due, every signal source on ---------------------------------------

_OOM_TRACEBACK = [
    "(VllmWorker TP0 pid={pid}) ERROR 12-01 10:00:00 [multiproc_executor.py:470] Traceback "
    "(most recent call last):",
    '(VllmWorker TP0 pid={pid}) ERROR 12-01 10:00:00 [multiproc_executor.py:470]   File "/usr/'
    'local/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 9, in execute',
    "(VllmWorker TP0 pid={pid}) ERROR 12-01 10:00:00 [multiproc_executor.py:470] torch.OutOfMemo"
    "ryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19"
    " GiB of which 1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, "
    "and 5.00 GiB is reserved by PyTorch but unallocated.",
]
_INFO = (
    "INFO 12-01 10:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 812.4 tokens/s, "
    "Avg generation throughput: 95.1 tokens/s, Running: 12 reqs, Waiting: 0 reqs"
)


def signals_run(seconds: float, interval_s: float) -> dict:
    import resource
    import tempfile
    import threading

    from inventory.agent.kernel_log import KernelXidSource, NvmlPciMap, open_kmsg
    from inventory.agent.mps import MpsControl, MpsMonitor
    from inventory.agent.signals import SignalOptions
    from inventory.agent.sources import NvmlSource

    folder = Path(tempfile.mkdtemp(prefix="bench-signals-"))
    state = eight_card_state()
    nvml = FakeNvml(state)
    nvml.nvmlInit()
    for card in state.cards:
        card.processes[0].kind = "mps"
    kmsg = folder / "kmsg"
    kmsg.write_text("")
    pipe_dir = folder / "mps"
    pipe_dir.mkdir()
    clients = [card.processes[0].pid for card in state.cards]
    (pipe_dir / "daemon.json").write_text(json.dumps({"servers": {"900": clients}}))
    control = (
        Path(__file__).resolve().parents[1]
        / "inventory"
        / "agent"
        / "fake_mps"
        / "nvidia-cuda-mps-control"
    )
    monitor = MpsMonitor(MpsControl(str(control), str(pipe_dir)), interval_s=1.0)
    options = SignalOptions(
        kernel_log=KernelXidSource([lambda: open_kmsg(str(kmsg))], NvmlPciMap(nvml)), mps=monitor
    )
    deployments = []
    for index, card in enumerate(state.cards):
        (folder / f"engine-{index}.log").write_text("")
        deployments.append(
            {
                "deployment_id": str(index + 1),
                "device_uuids": [card.uuid],
                "engine": "vllm",
                "pids": [p.pid for p in card.processes],
                "log_path": str(folder / f"engine-{index}.log"),
            }
        )
    plan = {
        "host": "bench",
        "collector": "nvml",
        "sample_interval_s": interval_s,
        "flush_interval_s": 10.0,
        "scrape_interval_s": 3600.0,
        "deployments": deployments,
    }
    sink = CountingSink()
    agent = Agent(lambda p: NvmlSource(nvml, time.time, options), sink)
    agent.apply_plan(plan)
    runtime = agent.hosts["bench"]
    tick_cpu: list[float] = []
    original_tick = runtime.tick

    def timed_tick() -> None:
        started = time.thread_time()
        original_tick()
        tick_cpu.append(time.thread_time() - started)

    runtime.tick = timed_tick
    stop = threading.Event()

    def write() -> None:
        # about 40 log lines a second over 8 logs, an OOM every 5 s, an Xid every 3 s, a
        # process exit and restart every 4 s
        n = 0
        while not stop.wait(0.025):
            n += 1
            with (folder / f"engine-{n % 8}.log").open("a") as engine:
                engine.write(_INFO + "\n")
            if n % 200 == 0:  # each OOM in the next engine's log
                with (folder / f"engine-{(n // 200) % 8}.log").open("a") as engine:
                    oom = "\n".join(line.format(pid=100 + n // 200) for line in _OOM_TRACEBACK)
                    engine.write(oom + "\n")
            if n % 120 == 0:
                with kmsg.open("a") as kernel:
                    kernel.write(f"4,{n},{n},-;NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=x, x\n")
            if n % 160 == 0:
                card = state.cards[(n // 160) % 8]
                old = card.processes.pop()
                card.processes.append(FakeProcess(old.pid + 100_000, old.name, old.used_bytes))

    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    writer = threading.Thread(target=write, daemon=True)
    monitor.start()
    started = time.monotonic()
    agent.start()
    writer.start()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    stop.set()
    agent.stop()
    monitor.stop()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (children.ru_utime + children.ru_stime) - (
        children_before.ru_utime + children_before.ru_stime
    )
    polls = len(tick_cpu)
    due = int(elapsed / interval_s)
    events = sink.events
    return {
        "seconds": round(elapsed, 1),
        "interval_s": interval_s,
        "polls_due": due,
        "polls_taken": polls,
        "tick_cpu_ms_mean": 1000 * sum(tick_cpu) / max(polls, 1),
        "tick_cpu_ms_max": 1000 * max(tick_cpu, default=0.0),
        "mps_control_cpu_ms_per_poll": 1000 * child_cpu / max(polls, 1),
        "events": events,
    }


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
    parser.add_argument("--signals-seconds", type=float, default=30.0)
    parser.add_argument("--skip-signals", action="store_true")
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
    if not args.skip_signals:
        signals = signals_run(args.signals_seconds, 0.5)
        report["signals"] = signals
        print(
            f"polls taken vs due, all signal sources on, {signals['seconds']:g} s at 0.5 s:"
            f" {signals['polls_taken']} of {signals['polls_due']}"
        )
        print(
            f"  agent CPU per poll: sampling tick {signals['tick_cpu_ms_mean']:.2f} ms mean,"
            f" {signals['tick_cpu_ms_max']:.2f} ms max; MPS control processes"
            f" {signals['mps_control_cpu_ms_per_poll']:.2f} ms; events {signals['events']}"
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
