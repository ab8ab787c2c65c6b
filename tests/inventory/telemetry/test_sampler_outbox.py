"""Interval sampler (max + last, never lose a peak), bounded outbox, process mapping."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inventory.telemetry.collector import NvmlCollector
from inventory.telemetry.engines import EngineReading, LatencySummary
from inventory.telemetry.fake_nvml import FakeHostState, FakeNvml, FakeProcess
from inventory.telemetry.outbox import Outbox
from inventory.telemetry.process_mapping import map_processes
from inventory.telemetry.readings import CollectorFault, TelemetryEvent
from inventory.telemetry.sampler import BASELINE_FORGOTTEN_AFTER_S, IntervalSampler
from inventory.telemetry.simulator.catalogue import MIB
from inventory.wire.schema import SCHEMA

from .conftest import h100_card, h200_mig_card


class Clock:
    def __init__(self) -> None:
        self.t = 1_767_571_200.0

    def __call__(self) -> float:
        return self.t


def test_a_one_poll_spike_is_the_interval_max_and_the_last_value_is_kept_apart():
    process = FakeProcess(10, "python3", 10_000 * MIB)
    state = FakeHostState([h100_card("h", 0, [process])])
    clock = Clock()
    collector = NvmlCollector(FakeNvml(state), "h", clock=clock)
    sampler = IntervalSampler("h")
    series = [10_000, 10_000, 60_000, 10_000, 12_000]  # one-second spike in the middle
    for used in series:
        process.used_bytes = used * MIB
        sampler.add_poll(collector.poll())
        clock.t += 1.0
    batch = sampler.flush(clock.t)
    card = batch["cards"][0]
    overhead = state.cards[0].base_used_bytes
    assert card["used_bytes_max"] == 60_000 * MIB + overhead
    assert card["used_bytes_last"] == 12_000 * MIB + overhead
    assert (
        card["free_bytes_min"]
        == card["total_bytes"] - card["reserved_bytes_last"] - card["used_bytes_max"]
    )
    assert card["free_bytes_last"] > card["free_bytes_min"]
    row = batch["processes"][0]
    assert (row["used_bytes_max"], row["used_bytes_last"]) == (60_000 * MIB, 12_000 * MIB)
    assert row["samples"] == len(series) and batch["polls"] == len(series)
    assert row["first_seen"] < row["last_seen"]


def test_batches_are_json_with_unique_ids_and_increasing_sequence():
    state = FakeHostState([h200_mig_card("mig", 0), h100_card("mig", 1)])
    clock = Clock()
    collector = NvmlCollector(FakeNvml(state), "mig", clock=clock)
    sampler = IntervalSampler("mig")
    batches = []
    for _ in range(3):
        for _ in range(5):
            sampler.add_poll(collector.poll())
            clock.t += 1.0
        batches.append(sampler.flush(clock.t))
    for batch in batches:
        assert json.loads(json.dumps(batch)) == batch
        assert batch["schema"] == SCHEMA and batch["host"] == "mig"
    assert [b["seq"] for b in batches] == [1, 2, 3]
    assert len({b["batch_id"] for b in batches}) == 3
    assert len({b["sampler_id"] for b in batches}) == 1
    # intervals tile time: each starts where the previous ended
    assert batches[1]["interval_start"] == batches[0]["interval_end"]
    assert batches[2]["interval_end"] - batches[2]["interval_start"] == 5.0
    first = batches[0]
    assert len(first["mig_devices"]) == 5 and first["cards"][0]["util_gpu_max"] is None
    assert first["cards"][1]["util_gpu_last"] is not None


def test_lost_card_keeps_its_identity_and_is_flagged_lost():
    state = FakeHostState([h100_card("h", 0)])
    clock = Clock()
    collector = NvmlCollector(FakeNvml(state), "h", clock=clock)
    sampler = IntervalSampler("h")
    sampler.add_poll(collector.poll())
    state.cards[0].lost = True
    sampler.add_poll(collector.poll())
    card = sampler.flush(clock.t)["cards"][0]
    assert card["lost"] is True and card["uuid"] == state.cards[0].uuid
    assert card["total_bytes"] == state.cards[0].total_bytes and card["samples"] == 1


def test_faults_are_counted_per_kind_and_events_capped():
    sampler = IntervalSampler("h", max_events=2, max_fault_kinds=1)
    for ts in (1.0, 2.0, 3.0):
        sampler.add_faults(
            [
                CollectorFault(
                    0, "nvmlDeviceGetMemoryInfo", "NVMLError_Unknown", f"m{ts}", "GPU-x", ts
                )
            ]
        )
    sampler.add_faults([CollectorFault(1, "other", "E", "m", None, 4.0)])
    sampler.add_events(TelemetryEvent(float(i), "oom", 0, None, {"i": i}) for i in range(5))
    batch = sampler.flush(10.0)
    assert batch["faults"] == [
        {
            "card_index": 0,
            "card_uuid": "GPU-x",
            "call": "nvmlDeviceGetMemoryInfo",
            "error": "NVMLError_Unknown",
            "message": "m3.0",
            "count": 3,
            "first_ts": 1.0,
            "last_ts": 3.0,
        }
    ]
    assert batch["faults_dropped"] == 1
    assert [e["detail"]["i"] for e in batch["events"]] == [0, 1]
    assert batch["events_dropped"] == 3
    assert sampler.flush(11.0)["events"] == []  # the next interval starts empty


def test_engine_rows_keep_peaks_and_report_the_interval_latency_not_the_lifetime():
    sampler = IntervalSampler("h")

    def reading(at, kv, running, buckets):
        summary = LatencySummary.from_buckets(buckets, buckets[-1][1], 0.0)
        return EngineReading("vllm", "dep", at, kv, running, 0.0, latency={"e2e": summary})

    old = ((0.3, 900.0), (1.0, 1000.0), (math.inf, 1000.0))  # lifetime: fast requests
    sampler.add_engine(reading(1.0, 0.2, 10, old))
    # The agent's first scrape holds the engine's whole life: no interval latency from it.
    assert "e2e" not in sampler.flush(1.0)["engines"][0]["latency"]
    # A flush without a scrape (scrapes are further apart) keeps the baseline
    assert sampler.flush(1.5)["engines"] == []
    new = ((0.3, 900.0), (1.0, 1100.0), (math.inf, 1100.0))  # this interval: all slow
    sampler.add_engine(reading(1.8, 0.9, 40, new))
    sampler.add_engine(reading(2.0, 0.4, 12, new))
    row = sampler.flush(2.0)["engines"][0]
    assert (row["kv_cache_usage_max"], row["kv_cache_usage_last"]) == (0.9, 0.4)
    assert (row["requests_running_max"], row["requests_running_last"]) == (40, 12)
    latency = row["latency"]["e2e"]
    # counted from the baseline's scrape to the newest, across the flush that had none
    assert (latency["count"], latency["window_s"]) == (100.0, 1.0)
    assert latency["p50_s"] > 0.3  # the interval's requests all took 0.3-1 s
    # An engine gone for longer than BASELINE_FORGOTTEN_AFTER_S starts from a baseline again.
    later = 2.0 + BASELINE_FORGOTTEN_AFTER_S + 1
    sampler.flush(later)
    sampler.add_engine(reading(later, 0.4, 12, ((0.3, 950.0), (1.0, 1500.0), (math.inf, 1500.0))))
    assert "e2e" not in sampler.flush(later + 1)["engines"][0]["latency"]


def test_a_restarted_engine_is_a_new_baseline_not_an_interval():
    # What an engine counted since it restarted covers a time nobody knows (the restart could
    # be a second or a whole scrape interval ago): counting it as this interval had put a
    # replay's or a restart's requests into one minute.
    sampler = IntervalSampler("h")

    def scrape(at, buckets):
        summary = LatencySummary.from_buckets(buckets, buckets[-1][1], 0.0)
        sampler.add_engine(EngineReading("vllm", "dep", at, 0.1, 1, 0.0, latency={"e2e": summary}))
        return sampler.flush(at)["engines"][0]["latency"].get("e2e")

    assert scrape(10.0, ((1.0, 500.0), (math.inf, 600.0))) is None  # baseline
    assert scrape(20.0, ((1.0, 40.0), (math.inf, 50.0))) is None  # counters went back
    assert scrape(30.0, ((1.0, 70.0), (math.inf, 80.0)))["window_s"] == 10.0
    # the total grew but a bucket went back: a restart too (Prometheus reads it so)
    assert scrape(40.0, ((1.0, 60.0), (math.inf, 5000.0))) is None
    counted = scrape(50.0, ((1.0, 90.0), (math.inf, 5030.0)))
    assert (counted["count"], counted["window_s"]) == (30.0, 10.0)


def test_engine_rows_carry_the_pool_the_engine_reported():
    sampler = IntervalSampler("h")
    config = {"num_gpu_blocks": "6400", "block_size": "16", "gpu_memory_utilization": "0.92"}
    sampler.add_engine(EngineReading("vllm", "dep", 1.0, 0.3, 2.0, 0.0, cache_config=config))
    sampler.add_engine(EngineReading("vllm", "dep", 2.0, 0.4, 3.0, 0.0))  # no config this time
    row = sampler.flush(2.0)["engines"][0]
    assert (row["kv_pool_tokens"], row["kv_pool_bytes"]) == (102_400, None)
    assert row["memory_fraction"] == pytest.approx(0.92)


def test_outbox_is_bounded_drops_the_oldest_and_drains_in_order():
    outbox = Outbox(max_batches=3)
    for seq in range(1, 6):
        outbox.put({"seq": seq})
    assert len(outbox) == 3 and outbox.dropped == 2
    published: list[int] = []
    broker = {"up": True, "fail_at": 4}

    def publish(batch):
        if not broker["up"] or batch["seq"] == broker["fail_at"]:
            raise ConnectionError("broker away")
        published.append(batch["seq"])

    broker["up"] = False
    assert outbox.drain(publish) == 0
    assert outbox.last_error.startswith("ConnectionError") and len(outbox) == 3
    broker["up"] = True
    assert outbox.drain(publish) == 1  # 3 goes, 4 fails and stays at the head
    assert published == [3] and [b["seq"] for b in outbox.pending()] == [4, 5]
    broker["fail_at"] = None
    assert outbox.drain(publish) == 2
    assert published == [3, 4, 5] and len(outbox) == 0 and outbox.last_error is None
    with pytest.raises(ValueError):
        Outbox(0)


def test_an_outbox_file_keeps_its_batches_and_drop_count_across_a_restart(tmp_path):
    path = tmp_path / "state" / "outbox-infer-01.sqlite3"
    first = Outbox(max_batches=2, path=path)
    for seq in range(1, 4):
        first.put({"seq": seq, "cards": [{"index": 0, "used_bytes_max": 2**40}]})
    again = Outbox(max_batches=2, path=path)  # the agent restarted during the outage
    assert [batch["seq"] for batch in again.pending()] == [2, 3]
    assert again.dropped == 1
    assert again.pending()[0]["cards"][0]["used_bytes_max"] == 2**40
    assert again.drain(lambda batch: None) == 2
    assert len(Outbox(max_batches=2, path=path)) == 0


def test_a_batch_dropped_at_the_bound_while_it_was_published_is_not_counted_lost():
    outbox = Outbox(max_batches=1)
    outbox.put({"seq": 1})

    def publish(batch):
        if batch["seq"] == 1:
            outbox.put({"seq": 2})  # the sampler's flush, while seq 1 is on its way out

    assert outbox.drain(publish) == 2
    assert outbox.dropped == 0


_WRITER = """
import sys
from inventory.telemetry.outbox import Outbox
outbox = Outbox(max_batches=100000, path=sys.argv[1])
seq = 0
while True:
    seq += 1
    outbox.put({"seq": seq, "pad": "x" * 2000})
    if seq == 50:
        print("ready", flush=True)
"""


def test_an_outbox_killed_mid_write_keeps_every_batch_it_had_committed(tmp_path):
    path = tmp_path / "outbox.sqlite3"
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert writer.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    writer.send_signal(signal.SIGKILL)
    writer.wait(10)
    seqs = [batch["seq"] for batch in Outbox(max_batches=100000, path=path).pending()]
    assert len(seqs) >= 50
    assert seqs == list(range(1, len(seqs) + 1)), "no gap, no duplicate, in order"


def test_process_mapping_by_pid_then_device_and_name():
    card0 = h100_card(
        "h",
        0,
        [
            FakeProcess(1, "/usr/bin/python3", MIB),
            FakeProcess(2, "/usr/bin/python3", MIB),
            FakeProcess(3, "/usr/bin/ollama", MIB),
            FakeProcess(4, "/usr/bin/python3", MIB, name_error=6),
        ],
    )
    mig = h200_mig_card("h", 1)
    state = FakeHostState([card0, mig])
    poll = NvmlCollector(FakeNvml(state), "h").poll()
    ci1 = poll.cards[1].mig_devices[1].uuid
    plan = [
        {
            "deployment_id": "vllm-a",
            "device_uuids": [card0.uuid],
            "pids": [1],
            "process_name_pattern": "python",
        },
        {"deployment_id": "vllm-b", "device_uuids": [card0.uuid], "process_name_pattern": "python"},
        {"deployment_id": "ollama", "device_uuids": [card0.uuid], "process_name_pattern": "ollama"},
        {"deployment_id": "burn", "device_uuids": [ci1]},
    ]
    mapping = map_processes(poll.cards, plan)
    assert mapping.deployments[(0, 1)] == "vllm-a"  # by pid
    assert mapping.ambiguous[(0, 2)] == ["vllm-a", "vllm-b"]  # two python deployments
    assert mapping.deployments[(0, 3)] == "ollama"
    assert (0, 4) in mapping.unmapped  # no name, and both python entries need one
    assert {mapping.deployments[(1, p)] for p in (12249, 12250, 12267)} == {"burn"}
