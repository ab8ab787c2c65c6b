"""The host agent's work: poll NVML, scrape engines, aggregate, publish; never touch a database.

A HostRuntime collects one host. It polls at the plan's sample interval, keeps each interval's
peaks in an IntervalSampler, and at each flush puts the batch into a bounded Outbox (a file in
the agent's state folder). Another thread drains the outboxes, oldest first, into `publish`, so
a broker that hangs or is down never costs a poll: batches wait on disk, survive a restart of
the agent, and go out in order once the broker is back.

The same code collects a real host (pynvml, HTTP) and a simulated one: only the Source differs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from inventory.agent import allocator_scrape
from inventory.telemetry.collector import NvmlCollector
from inventory.telemetry.engines import ScrapeTarget, scrape_all
from inventory.telemetry.outbox import Outbox
from inventory.telemetry.pod_attribution import attribute_pods
from inventory.telemetry.process_mapping import map_processes
from inventory.telemetry.readings import CollectorFault, PollResult, TelemetryEvent
from inventory.telemetry.sampler import IntervalSampler

log = logging.getLogger(__name__)

Publish = Callable[[dict[str, Any]], None]
# request_plan(host, digest of the plan kept, or None): ask the console for the host's plan.
RequestPlan = Callable[[str, "str | None"], None]
DEFAULT_PLAN = {
    "sample_interval_s": 1.0,
    "flush_interval_s": 10.0,
    "scrape_interval_s": 5.0,
    "deployments": [],
}


class Source(Protocol):
    """Where one host's readings come from."""

    def nvml(self) -> Any: ...

    def now(self) -> float: ...

    def fetch(self, url: str, timeout: float) -> str: ...

    def deployments(self, planned: list[dict]) -> list[dict]:
        """The plan's deployment entries, completed with what this source knows (PIDs...)."""
        ...

    def events(self) -> list[TelemetryEvent]: ...


def state_path(state_dir: Path, kind: str, host: str, suffix: str) -> Path:
    """One of a host's files in the state folder; a name that is no safe file name is hashed."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}", host):
        host = hashlib.sha256(host.encode()).hexdigest()[:32]
    return state_dir / f"{kind}-{host}{suffix}"


class HostRuntime:
    def __init__(
        self,
        host: str,
        source: Source,
        publish: Publish,
        *,
        outbox_max: int = 360,
        state_dir: Path | None = None,
    ):
        self.host = host
        self.source = source
        self.publish = publish
        self.collector = NvmlCollector(source.nvml(), host, clock=source.now)
        # On a Kubernetes node, the pods there by UID (inventory.agent.kubernetes); else None.
        self.pods = getattr(source, "pods", None)
        self.sampler = IntervalSampler(host)
        outbox = state_path(state_dir, "outbox", host, ".sqlite3") if state_dir else None
        self.outbox = Outbox(outbox_max, outbox)
        self.plan: dict[str, Any] = dict(DEFAULT_PLAN)
        self._allocator: dict[int, dict] = {}
        # Containerised engines that should publish allocator figures and leave none.
        make_missing = getattr(source, "missing_allocator_figures", None)
        self.missing_allocator = make_missing() if make_missing is not None else None
        # A real host's exits, restarts, engine logs, kernel Xids and MPS daemon
        # (inventory.agent.signals); the simulator raises those events itself.
        make_signals = getattr(source, "signals", None)
        self.signals = make_signals() if make_signals is not None else None
        start = source.now()
        self.next_poll = start
        self._next_scrape = start
        self._next_flush = start + self.plan["flush_interval_s"]

    def apply_plan(self, plan: dict[str, Any]) -> None:
        flush_changed = plan.get("flush_interval_s") != self.plan.get("flush_interval_s")
        self.plan = {**DEFAULT_PLAN, **plan}
        if flush_changed:
            self._next_flush = min(self._next_flush, self.source.now() + plan["flush_interval_s"])

    def tick(self) -> None:
        """One poll; a scrape and a flush when they are due."""
        now = self.source.now()
        interval = float(self.plan["sample_interval_s"])
        # On a fixed grid: from `now`, each poll's lateness would push back all the later ones
        # (about 1 % of the polls at 0.5 s). A stall skips the polls it missed, never bursts.
        self.next_poll += interval
        if self.next_poll <= now:
            self.next_poll = now + interval
        entries = self.source.deployments(self.plan["deployments"])
        poll = self.collector.poll()
        if self.pods is not None:
            entries = attribute_pods(entries, poll.cards, self.pods(), self.pods.owner_of)
        containers = self.signals.container_of if self.signals is not None else None
        mapping = map_processes(poll.cards, entries, containers)
        signals = self._collect_signals(poll, mapping.deployments, entries)
        self.sampler.add_poll(poll, mapping.deployments)
        self.sampler.add_events(signals[0])
        self.sampler.add_faults(signals[1])
        self.sampler.add_events(self.source.events())
        if now >= self._next_scrape:
            self._next_scrape = now + float(self.plan["scrape_interval_s"])
            self._scrape(entries, poll, mapping.deployments)
        if now >= self._next_flush:
            # On a grid too: a batch a flush interval, not one every interval plus a poll.
            flush_every = float(self.plan["flush_interval_s"])
            self._next_flush += flush_every
            if self._next_flush <= now:
                self._next_flush = now + flush_every
            self.flush(now)

    def _collect_signals(self, poll, deployments, entries):
        if self.signals is None:
            return [], []
        try:
            return self.signals.collect(poll, deployments, entries, self._allocator.get)
        except Exception as exc:  # a bug in one signal source must not cost the poll
            log.exception("%s: signals failed", self.host)
            return [], [CollectorFault(None, "signals", type(exc).__name__, str(exc), ts=poll.ts)]

    def flush(self, now: float) -> None:
        """Close the interval into a batch and queue it; publishing is another thread's job."""
        batch = self.sampler.flush(now)
        for row in batch["processes"]:
            figures = self._allocator.get(row["pid"])
            row["allocator"] = dict(figures) if figures is not None else None
        # the next interval's peaks start from its own first scrape
        for figures in self._allocator.values():
            for key in ("reserved_bytes", "allocated_bytes"):
                figures.pop(f"{key}_max", None)
        batch["agent"] = {"outbox_depth": len(self.outbox), "outbox_dropped": self.outbox.dropped}
        if self.signals is not None and (mps := self.signals.mps_live()) is not None:
            batch["agent"]["mps"] = mps  # the MPS servers now: who dies together
        self.outbox.put(batch)

    def publish_pending(self) -> int:
        """Publish what waits, oldest first; return how many went out."""
        waiting = len(self.outbox)
        sent = self.outbox.drain(self.publish)
        if self.outbox.last_error and waiting > sent:
            log.warning(
                "%s: %d batch(es) waiting to publish: %s",
                self.host,
                len(self.outbox),
                self.outbox.last_error,
            )
        elif sent > 1:
            log.info("%s: backfilled %d batches", self.host, sent)
        return sent

    def _scrape(self, entries: list[dict], poll: PollResult, deployments=None) -> None:
        targets = [
            ScrapeTarget(e["deployment_id"], e["engine"], e["metrics_url"], e.get("model_name"))
            for e in entries
            if e.get("metrics_url")
            and e.get("engine") in {"vllm", "sglang", "tgi", "tei", "ollama"}
        ]
        readings, faults = scrape_all(targets, self.source.fetch, clock=self.source.now)
        for reading in readings:
            self.sampler.add_engine(reading)
        self.sampler.add_faults(faults)
        if self.signals is not None:
            self.sampler.add_events(self.signals.engine_events(readings))
        for entry in entries:
            if entry.get("allocator_url"):
                self._read_allocator(entry)
        self._read_allocator_snapshots(poll)
        if self.missing_allocator is not None and self.signals is not None:
            self.sampler.add_faults(
                self.missing_allocator.check(
                    self.source.now(),
                    entries,
                    deployments or {},
                    set(self._allocator),
                    lambda pid: self.signals.container_of(pid) is not None,
                )
            )

    def _read_allocator(self, entry: dict) -> None:
        """Per-process caching-allocator figures (torch.cuda.memory_stats()), with the
        interval's peaks of reserved and allocated bytes, not only their last values."""
        try:
            figures = allocator_scrape.read(self.source.fetch, entry["allocator_url"])
        except Exception as exc:  # a bad or absent endpoint is a fault, never a crash
            self.sampler.add_faults(
                [
                    CollectorFault(
                        None,
                        "scrape:allocator",
                        type(exc).__name__,
                        f"{entry['deployment_id']} {entry['allocator_url']}: {exc}",
                        ts=self.source.now(),
                    )
                ]
            )
            return
        self._keep_allocator(figures)

    def _read_allocator_snapshots(self, poll: PollResult) -> None:
        """The figures that engines in containers leave in the host's snapshot folder, for
        the processes NVML lists (the source's `allocator_snapshots`, where it has one)."""
        read = getattr(self.source, "allocator_snapshots", None)
        if read is None:
            return
        pids = {process.pid for card in poll.cards for process in card.processes}
        figures, problems = read(pids)
        self.sampler.add_faults(
            [
                CollectorFault(None, "scrape:allocator", "Snapshot", problem, ts=self.source.now())
                for problem in problems
            ]
        )
        self._keep_allocator(figures)

    def _keep_allocator(self, figures: dict[int, dict]) -> None:
        for pid, now in figures.items():
            before = self._allocator.get(pid) or {}
            for key in ("reserved_bytes", "allocated_bytes"):
                if now.get(key) is not None:
                    now[f"{key}_max"] = max(now[key], before.get(f"{key}_max") or 0)
            now.setdefault("largest_free_block_bytes", None)
            self._allocator[pid] = now


SourceFactory = Callable[[dict[str, Any]], "Source | None"]


class Agent:
    """Every host this process collects: one thread samples, another publishes."""

    # How often the publisher looks for new batches, and how long it waits at most after a
    # failed publish (the wait doubles from one second while the broker stays away).
    PUBLISH_IDLE_S = 0.5
    PUBLISH_BACKOFF_MAX_S = 30.0

    def __init__(
        self,
        source_for: SourceFactory,
        publish: Publish,
        *,
        outbox_max: int = 360,
        state_dir: Path | None = None,
        request_plan: RequestPlan | None = None,
        wanted: tuple[str, ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ):
        self.source_for = source_for
        self.publish = publish
        self.outbox_max = outbox_max
        self.state_dir = state_dir
        self.request_plan = request_plan
        self.clock = clock
        self.hosts: dict[str, HostRuntime] = {}
        # Per host: when its plan last came or was said to hold (None: not since this start,
        # so asked for at once), and when it was last asked for. `wanted` hosts (this
        # machine's, for an NVML agent) are asked for even without a kept plan.
        self._plan_heard: dict[str, float | None] = dict.fromkeys(wanted)
        self._plan_asked: dict[str, float] = {}
        # Per host: requests in a row that got no answer (the retry backs off with them).
        self._plan_unanswered: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def apply_plan(self, plan: dict[str, Any]) -> bool:
        """Collect the plan's host from now on (if this agent can); False if it cannot."""
        with self._lock:
            runtime = self.hosts.get(plan["host"])
            if runtime is None:
                source = self.source_for(plan)
                if source is None:
                    return False
                runtime = HostRuntime(
                    plan["host"],
                    source,
                    self.publish,
                    outbox_max=self.outbox_max,
                    state_dir=self.state_dir,
                )
                self.hosts[plan["host"]] = runtime
                log.info("collecting %s", plan["host"])
            runtime.apply_plan(plan)
            self._keep_plan(plan)
            return True

    def heard_from_console(self, plan: dict[str, Any]) -> None:
        """A plan came from the console: the host's plan holds for its `valid_for_s` again."""
        self._heard(plan["host"])

    def _heard(self, host: str) -> None:
        self._plan_heard[host] = self.clock()
        self._plan_asked.pop(host, None)
        self._plan_unanswered.pop(host, None)

    def plan_still_valid(self, host: str, digest: str) -> None:
        """The console says the host's plan is still `digest`: if that is the one collected,
        it holds for its `valid_for_s` again (another digest: a newer plan is on its way)."""
        with self._lock:
            runtime = self.hosts.get(host)
            current = runtime is not None and runtime.plan.get("digest") == digest
        if current:
            self._heard(host)

    # An agent whose request went unanswered (console or broker away, or a wanted host the
    # console does not collect) asks again after this, doubled for each request in a row
    # that got no answer, up to PLAN_ASK_RETRY_MAX_S.
    PLAN_ASK_RETRY_S = 60.0
    PLAN_ASK_RETRY_MAX_S = 3600.0

    def _retry_after(self, host: str) -> float:
        unanswered = self._plan_unanswered.get(host, 0)
        if not unanswered:
            return self.PLAN_ASK_RETRY_S
        return min(self.PLAN_ASK_RETRY_MAX_S, self.PLAN_ASK_RETRY_S * 2.0 ** (unanswered - 1))

    def ask_for_due_plans(self) -> int:
        """Ask the console for every plan not heard of for its `valid_for_s` (at start: every
        plan, and every wanted host's), a request that got no answer again after a backed-off
        retry (PLAN_ASK_RETRY_S, doubling); how many were asked for."""
        if self.request_plan is None:
            return 0
        now = self.clock()
        with self._lock:
            kept = {host: runtime.plan for host, runtime in self.hosts.items()}
        asked = 0
        for host in sorted(set(kept) | set(self._plan_heard)):
            plan = kept.get(host, {})
            heard = self._plan_heard.get(host)
            valid_for = plan.get("valid_for_s")
            if heard is not None and (valid_for is None or now - heard < valid_for):
                continue  # a plan from before valid_for_s holds until the console says
            asked_at = self._plan_asked.get(host)
            if asked_at is not None:
                if now - asked_at < self._retry_after(host):
                    continue
                # The last request is still unanswered: this one counts toward the back-off.
                self._plan_unanswered[host] = self._plan_unanswered.get(host, 0) + 1
            self._plan_asked[host] = now
            try:
                self.request_plan(host, plan.get("digest"))
            except Exception as error:  # the broker is away: asked again after the retry
                log.warning("%s: could not ask for its plan: %s", host, error)
                continue
            asked += 1
        return asked

    def _keep_plan(self, plan: dict[str, Any]) -> None:
        """The last plan, kept so that a restart samples at once, broker or no broker."""
        if self.state_dir is None:
            return
        path = state_path(self.state_dir, "plan", plan["host"], ".json")
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(json.dumps(plan))
        os.replace(temporary, path)

    def resume_kept_plans(self) -> int:
        """Collect again every host a kept plan names; how many it could."""
        if self.state_dir is None or not self.state_dir.is_dir():
            return 0
        resumed = 0
        for path in sorted(self.state_dir.glob("plan-*.json")):
            try:
                resumed += self.apply_plan(json.loads(path.read_text()))
            except (OSError, ValueError, KeyError, TypeError) as error:
                log.warning("ignoring the kept plan %s: %s", path.name, error)
        return resumed

    def simulator_of(self, host: str):
        """The simulated host's `run_action`, where this agent collects that host from a
        simulator (host actions marked `simulated = true` run on it)."""
        with self._lock:
            runtime = self.hosts.get(host)
        return getattr(runtime.source, "run_action", None) if runtime else None

    def _runtimes(self) -> list[HostRuntime]:
        with self._lock:
            return list(self.hosts.values())

    def run_once(self) -> float:
        """Tick every host that is due; return the seconds until the next one is."""
        runtimes = self._runtimes()
        for runtime in runtimes:
            if runtime.source.now() >= runtime.next_poll:
                try:
                    runtime.tick()
                except Exception:  # one host's bug must not stop the others
                    log.exception("%s: tick failed", runtime.host)
                    runtime.next_poll = runtime.source.now() + 1.0
        if not runtimes:
            return 0.5
        return max(0.0, min(r.next_poll - r.source.now() for r in runtimes))

    def publish_once(self) -> bool:
        """Drain every host's outbox; False if a publish failed (the broker is away)."""
        healthy = True
        for runtime in self._runtimes():
            runtime.publish_pending()
            healthy = healthy and runtime.outbox.last_error is None
        # The publisher's thread, not the sampler's: a broker that hangs costs no poll.
        if healthy:
            self.ask_for_due_plans()
        return healthy

    def start(self) -> None:
        """Sample and publish from now on, starting with the hosts of the kept plans."""
        if resumed := self.resume_kept_plans():
            log.info("resumed %d host(s) from their kept plans", resumed)
        self._threads = [
            threading.Thread(target=self._sample_loop, name="host-agent-sampler", daemon=True),
            threading.Thread(target=self._publish_loop, name="host-agent-publisher", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        for runtime in self._runtimes():
            # One last flush, so a clean shutdown loses no poll; what cannot be published now
            # waits in the outbox file for the next start.
            if runtime.signals is not None:
                runtime.sampler.add_events(runtime.signals.drain(runtime.source.now()))
                runtime.signals.close()
            if runtime.sampler.polls:
                runtime.flush(runtime.source.now())
            runtime.publish_pending()

    def _sample_loop(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(min(self.run_once(), 0.5))

    def _publish_loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            failures = 0 if self.publish_once() else failures + 1
            wait = self.PUBLISH_IDLE_S
            if failures:
                wait = min(self.PUBLISH_BACKOFF_MAX_S, 2.0 ** (failures - 1))
            self._stop.wait(wait)


def wall_clock() -> float:
    return time.time()
