"""The host agent's runtime: sampling, peaks, outbox and backfill, faults that stay local."""

import datetime as dt
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kombu.exceptions import OperationalError

from inventory.agent.runtime import Agent, HostRuntime
from inventory.agent.sources import FleetSimulator
from tests.processes import wait_for

MIDNIGHT = dt.datetime(2026, 11, 30, tzinfo=dt.UTC).timestamp()


class Clock:
    def __init__(self, start: float):
        self.t = start

    def __call__(self) -> float:
        return self.t


class Sink:
    """A publish function whose broker can be switched off."""

    def __init__(self):
        self.batches: list[dict] = []
        self.down = False

    def __call__(self, batch: dict) -> None:
        if self.down:
            raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        self.batches.append(batch)


def _plan(host: str, flush_s: float = 10.0) -> dict:
    return {"host": host, "collector": "simulated", "sample_interval_s": 1.0,
            "flush_interval_s": flush_s, "deployments": []}  # fmt: skip


@pytest.fixture
def simulated():
    clock = Clock(MIDNIGHT + 14 * 3600)  # the daily peak of the 8-card scenario
    simulator = FleetSimulator(seed=0, clock=clock)
    return simulator, clock


def test_a_shifted_day_runs_a_later_hours_traffic_dated_now():
    at_peak = FleetSimulator(seed=0, clock=Clock(MIDNIGHT + 14 * 3600))
    clock = Clock(MIDNIGHT + 3 * 3600)
    shifted = FleetSimulator(seed=0, clock=clock, day_shift_s=11 * 3600)
    unshifted = FleetSimulator(seed=0, clock=clock)
    load = {}
    for name, simulator in (("peak", at_peak), ("shifted", shifted), ("unshifted", unshifted)):
        host = simulator.fleet.hosts["infer-00"]
        assert simulator.advance(host) == simulator.clock()
        load[name] = [replica.concurrency for replica in host.replicas]
    assert load["shifted"] == load["peak"]
    assert sum(load["unshifted"]) < sum(load["peak"]) / 2


def _run(runtime: HostRuntime, clock: Clock, seconds: int) -> None:
    for _ in range(seconds):
        clock.t += 1
        runtime.tick()
        runtime.publish_pending()  # the publisher thread, between two polls


def test_batches_keep_each_intervals_peak_and_last(simulated):
    simulator, clock = simulated
    sink = Sink()
    runtime = HostRuntime("infer-01", simulator.source_for(_plan("infer-01")), sink)
    runtime.apply_plan(_plan("infer-01"))
    _run(runtime, clock, 31)
    assert [batch["seq"] for batch in sink.batches] == [1, 2, 3]
    cards = sink.batches[-1]["cards"]
    assert len(cards) == 8
    for card in cards:
        assert card["used_bytes_max"] >= card["used_bytes_last"]
        assert card["samples"] == 10
    assert sink.batches[-1]["processes"], "the simulated engines run processes"


def test_a_broker_outage_is_buffered_and_backfilled_in_order(simulated):
    simulator, clock = simulated
    sink = Sink()
    runtime = HostRuntime("infer-01", simulator.source_for(_plan("infer-01")), sink)
    runtime.apply_plan(_plan("infer-01"))
    _run(runtime, clock, 11)
    sink.down = True
    _run(runtime, clock, 40)
    assert len(runtime.outbox) == 4
    assert "Connection refused" in runtime.outbox.last_error
    sink.down = False
    _run(runtime, clock, 10)
    seqs = [batch["seq"] for batch in sink.batches]
    assert seqs == list(range(1, 7))
    assert sink.batches[-1]["agent"]["outbox_depth"] == 0  # backfilled before it was queued
    assert len(runtime.outbox) == 0


def test_the_outbox_is_bounded_and_counts_what_it_dropped(simulated):
    simulator, clock = simulated
    sink = Sink()
    runtime = HostRuntime("infer-01", simulator.source_for(_plan("infer-01")), sink, outbox_max=3)
    runtime.apply_plan(_plan("infer-01"))
    sink.down = True
    _run(runtime, clock, 61)
    assert len(runtime.outbox) == 3
    assert runtime.outbox.dropped == 3
    sink.down = False
    _run(runtime, clock, 10)
    assert [batch["seq"] for batch in sink.batches] == [4, 5, 6, 7]
    assert sink.batches[-1]["agent"]["outbox_dropped"] == 3


def test_a_lost_card_does_not_stop_the_others(simulated):
    simulator, clock = simulated
    sink = Sink()
    runtime = HostRuntime("infer-01", simulator.source_for(_plan("infer-01")), sink)
    runtime.apply_plan(_plan("infer-01"))
    _run(runtime, clock, 2)
    simulator.fleet.hosts["infer-01"].lose_card(3)
    _run(runtime, clock, 10)
    batch = sink.batches[-1]
    lost = [card for card in batch["cards"] if card["index"] == 3]
    assert lost and lost[0]["lost"]
    healthy = [card for card in batch["cards"] if card["index"] != 3]
    assert len(healthy) == 7
    # Still read every second, even where the lost card's tensor-parallel partners died with it.
    assert all(card["samples"] == 10 and card["used_bytes_last"] is not None for card in healthy)
    assert any(fault["error"] == "NVMLError_GpuIsLost" for fault in batch["faults"])


def test_simulated_processes_map_to_the_console_deployments(simulated):
    simulator, clock = simulated
    sink = Sink()
    plan = _plan("infer-01")
    plan["deployments"] = [
        {"deployment_id": "41", "runtime_name": "chat-large", "engine": "vllm",
         "device_uuids": [], "metrics_url": ""},
    ]  # fmt: skip
    runtime = HostRuntime("infer-01", simulator.source_for(plan), sink)
    runtime.apply_plan(plan)
    _run(runtime, clock, 11)
    batch = sink.batches[-1]
    mapped = {row["deployment_id"] for row in batch["processes"]}
    assert "41" in mapped
    engines = {row["deployment_id"]: row for row in batch["engines"]}
    assert engines["41"]["requests_running_last"] is not None
    chat = [row for row in batch["processes"] if row["deployment_id"] == "41"]
    assert all(row["allocator"]["reserved_bytes"] >= row["allocator"]["allocated_bytes"]
               for row in chat)  # fmt: skip


def test_an_agent_only_takes_hosts_it_can_collect(simulated):
    simulator, _ = simulated
    agent = Agent(simulator.source_for, Sink())
    assert agent.apply_plan(_plan("infer-01"))
    assert not agent.apply_plan({**_plan("gpu-07"), "collector": "nvml"})
    assert not agent.apply_plan(_plan("not-in-the-simulator"))
    assert set(agent.hosts) == {"infer-01"}


def test_a_clean_stop_flushes_the_polls_since_the_last_batch_and_nothing_more(simulated):
    simulator, clock = simulated
    sink = Sink()
    agent = Agent(simulator.source_for, sink)
    agent.apply_plan(_plan("infer-01"))
    while not sink.batches:
        clock.t += 1
        agent.run_once()
        agent.publish_once()
    agent.stop()
    assert len(sink.batches) == 1, "an interval with no poll is not a batch"
    clock.t += 1
    agent.run_once()
    agent.stop()
    assert [batch["polls"] for batch in sink.batches] == [10, 1]


def test_sampling_goes_on_while_the_broker_hangs():
    """The field's failure: a publish that blocks must not cost the polls behind it."""
    released = threading.Event()
    published: list[dict] = []

    def hanging_publish(batch):
        released.wait(30)
        published.append(batch)

    simulator = FleetSimulator(seed=0, clock=time.time)
    agent = Agent(simulator.source_for, hanging_publish)
    agent.apply_plan({**_plan("infer-01"), "sample_interval_s": 0.05, "flush_interval_s": 0.25})
    agent.start()
    try:
        time.sleep(2.0)
        runtime = agent.hosts["infer-01"]
        waiting = runtime.outbox.pending()
        polls = runtime.sampler.polls + sum(batch["polls"] for batch in waiting)
        assert len(waiting) >= 4, "flushes went on while the first publish hung"
        assert polls >= 20, f"only {polls} polls in 2 s at 20 a second"
    finally:
        released.set()
        agent.stop()
    seqs = [batch["seq"] for batch in published]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(runtime.outbox) == 0


def test_an_agent_restarted_during_an_outage_publishes_what_waited_on_disk(simulated, tmp_path):
    simulator, clock = simulated
    sink = Sink()
    sink.down = True
    before = HostRuntime(
        "infer-01", simulator.source_for(_plan("infer-01")), sink, state_dir=tmp_path
    )
    before.apply_plan(_plan("infer-01"))
    _run(before, clock, 31)  # three batches wait; then the agent process is gone
    assert (tmp_path / "outbox-infer-01.sqlite3").exists()
    sink.down = False
    after = HostRuntime(
        "infer-01", simulator.source_for(_plan("infer-01")), sink, state_dir=tmp_path
    )
    after.apply_plan(_plan("infer-01"))
    assert after.publish_pending() == 3
    assert [batch["seq"] for batch in sink.batches] == [1, 2, 3]


def test_the_agent_process_leaves_django_and_its_database_alone():
    """Celery loads Django in any process where DJANGO_SETTINGS_MODULE is set, and with it
    the console and its database settings: a GPU host must never get there by importing the
    agent."""
    probe = (
        "import json, os, sys; import inventory.agent.app; "
        "print(json.dumps([os.environ.get('DJANGO_SETTINGS_MODULE'), "
        "'console.settings' in sys.modules, 'console.celery' in sys.modules]))"
    )
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL"}
    }
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=environment,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
        check=True,
    )
    assert json.loads(result.stdout) == [None, False, False]


def test_polls_keep_to_their_grid_when_each_one_runs_late(simulated):
    """A poll that runs late must not push back the later ones: 60 polls at 1 s take 60 s."""
    simulator, clock = simulated
    runtime = HostRuntime("infer-01", simulator.source_for(_plan("infer-01")), Sink())
    runtime.apply_plan(_plan("infer-01"))
    start = clock.t
    for _ in range(60):
        clock.t = runtime.next_poll + 0.05  # the loop wakes 50 ms late each time
        runtime.tick()
    assert runtime.next_poll == pytest.approx(start + 60)
    polls = sum(batch["polls"] for batch in runtime.outbox.pending()) + runtime.sampler.polls
    assert polls == 60


def test_batches_keep_to_the_flush_grid_when_each_poll_runs_late(simulated):
    """A batch every 10 s however late each poll wakes: 125 polls of 1 s make 12 batches."""
    simulator, clock = simulated
    runtime = HostRuntime("infer-01", simulator.source_for(_plan("infer-01")), Sink())
    runtime.apply_plan(_plan("infer-01"))
    for n in range(125):
        clock.t = runtime.next_poll + (0.05, 0.6, 0.3)[n % 3]  # each poll wakes late
        runtime.tick()
    assert len(runtime.outbox.pending()) == 12


def test_a_stall_skips_the_polls_it_missed_rather_than_bursting_them(simulated):
    simulator, clock = simulated
    runtime = HostRuntime("infer-01", simulator.source_for(_plan("infer-01")), Sink())
    runtime.apply_plan(_plan("infer-01"))
    runtime.tick()
    clock.t += 5.5  # the process was frozen for five polls
    runtime.tick()
    assert runtime.next_poll == clock.t + 1.0


def test_a_restarted_agent_samples_at_once_from_the_plan_it_kept(tmp_path):
    """The broker may be away when the agent comes back: it must not wait for a new plan."""
    published: list[dict] = []
    simulator = FleetSimulator(seed=0, clock=time.time)
    plan = {**_plan("infer-01"), "sample_interval_s": 0.05, "flush_interval_s": 0.25}
    before = Agent(simulator.source_for, published.append, state_dir=tmp_path)
    assert before.apply_plan(plan)
    assert json.loads((tmp_path / "plan-infer-01.json").read_text())["host"] == "infer-01"

    after = Agent(simulator.source_for, published.append, state_dir=tmp_path)
    after.start()  # no plan sent: the broker is still down
    try:
        wait_for(lambda: published, timeout=10, what="a batch from the plan kept on disk")
    finally:
        after.stop()
    assert set(after.hosts) == {"infer-01"}
    assert published and all(batch["host"] == "infer-01" for batch in published)


class Asked:
    """The agent's request_plan, caught: (host, digest) per request; it can fail as a broker
    that is away does."""

    def __init__(self):
        self.requests: list[tuple[str, str | None]] = []
        self.down = False

    def __call__(self, host: str, digest: str | None) -> None:
        if self.down:
            raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        self.requests.append((host, digest))


def _valid_plan(host: str, digest: str, valid_for_s: float = 3660.0) -> dict:
    return {**_plan(host), "digest": digest, "valid_for_s": valid_for_s}


def test_an_agent_asks_at_start_for_its_kept_and_wanted_plans_then_only_when_due(
    simulated, tmp_path
):
    simulator, clock = simulated
    asked = Asked()
    before = Agent(simulator.source_for, Sink(), state_dir=tmp_path)
    assert before.apply_plan(_valid_plan("infer-01", "d1"))
    agent = Agent(
        simulator.source_for, Sink(), state_dir=tmp_path, request_plan=asked,
        wanted=("mps-l40s",), clock=clock,
    )  # fmt: skip
    assert agent.resume_kept_plans() == 1
    # At start: the kept plan by its digest, the wanted host with none kept.
    assert agent.ask_for_due_plans() == 2
    assert asked.requests == [("infer-01", "d1"), ("mps-l40s", None)]
    clock.t += 1
    assert agent.ask_for_due_plans() == 0  # unanswered, but not yet retried
    # The console answers both: a plan for the wanted host, word that the kept one holds.
    agent.apply_plan(_valid_plan("mps-l40s", "d2"))
    agent.heard_from_console(_valid_plan("mps-l40s", "d2"))
    agent.plan_still_valid("infer-01", "d1")
    clock.t += 3600
    assert agent.ask_for_due_plans() == 0  # both hold for their valid_for_s
    clock.t += 61
    assert agent.ask_for_due_plans() == 2
    assert asked.requests[-2:] == [("infer-01", "d1"), ("mps-l40s", "d2")]


def test_plan_still_valid_renews_only_the_plan_being_collected(simulated):
    simulator, clock = simulated
    asked = Asked()
    agent = Agent(simulator.source_for, Sink(), request_plan=asked, clock=clock)
    agent.apply_plan(_valid_plan("infer-01", "d1", valid_for_s=100))
    agent.heard_from_console(_valid_plan("infer-01", "d1", valid_for_s=100))
    clock.t += 101
    assert agent.ask_for_due_plans() == 1
    # Word for another digest (a newer plan is on its way) does not renew the one kept.
    agent.plan_still_valid("infer-01", "d0")
    agent.plan_still_valid("not-collected-here", "d1")
    clock.t += agent.PLAN_ASK_RETRY_S
    assert agent.ask_for_due_plans() == 1
    agent.plan_still_valid("infer-01", "d1")
    clock.t += 99
    assert agent.ask_for_due_plans() == 0
    clock.t += 2
    assert agent.ask_for_due_plans() == 1
    assert asked.requests == [("infer-01", "d1")] * 3


def test_an_unanswered_or_failed_request_is_retried_backing_off(simulated):
    simulator, clock = simulated
    asked = Asked()
    agent = Agent(
        simulator.source_for, Sink(), request_plan=asked, wanted=("not-registered",), clock=clock
    )
    asked.down = True
    assert agent.ask_for_due_plans() == 0  # the broker is away: nothing was asked
    asked.down = False
    clock.t += agent.PLAN_ASK_RETRY_S
    assert agent.ask_for_due_plans() == 1
    times = [clock.t]
    while clock.t < times[0] + 4 * agent.PLAN_ASK_RETRY_MAX_S:
        clock.t += 10
        if agent.ask_for_due_plans():
            times.append(clock.t)
    gaps = [round(b - a) for a, b in itertools.pairwise(times)]
    # Never answered (a host the console does not collect; the failed request counts as one):
    # 60 s, then doubling, up to an hour.
    assert gaps[:6] == [60, 120, 240, 480, 960, 1920]
    assert max(gaps) == agent.PLAN_ASK_RETRY_MAX_S
    # An answer ends the back-off: asked at once when due again.
    agent.apply_plan(_valid_plan("infer-01", "d1", valid_for_s=30))
    agent.heard_from_console(_valid_plan("infer-01", "d1", valid_for_s=30))
    clock.t += 31
    assert ("infer-01", "d1") not in asked.requests
    agent.ask_for_due_plans()
    assert asked.requests[-1] == ("infer-01", "d1")
