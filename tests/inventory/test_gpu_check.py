"""The real-GPU check's verdict logic, on the fake NVML (the hardware run is in docs/)."""

from inventory.agent.gpu_check import compare, verdict
from inventory.telemetry.collector import NvmlCollector
from inventory.telemetry.fake_nvml import FakeHostState, FakeNvml, FakeProcess
from inventory.telemetry.simulator.catalogue import MIB, build_card, gpu_type


def _poll(processes):
    card = build_card(gpu_type("H200"), "gpu-box", 0)
    card.processes = processes
    collector = NvmlCollector(FakeNvml(FakeHostState([card], "590.48.01")), "gpu-box")
    return collector.poll()


def test_every_process_found_with_the_same_context_overhead_passes():
    poll = _poll([FakeProcess(101, "python", (1024 + 500) * MIB),
                  FakeProcess(102, "python", (2048 + 502) * MIB)])  # fmt: skip
    rows = compare({101: 1024, 102: 2048}, poll, 0)
    assert [(row.pid, row.excess_mib) for row in rows] == [(101, 500), (102, 502)]
    ok, reason = verdict(rows, tolerance_mib=64)
    assert ok, reason


def test_a_process_nvml_does_not_report_fails():
    poll = _poll([FakeProcess(101, "python", 1524 * MIB)])
    ok, reason = verdict(compare({101: 1024, 999: 2048}, poll, 0), tolerance_mib=64)
    assert not ok
    assert "999" in reason


def test_overheads_that_disagree_fail():
    poll = _poll([FakeProcess(101, "python", 1524 * MIB), FakeProcess(102, "python", 3048 * MIB)])
    ok, reason = verdict(compare({101: 1024, 102: 2048}, poll, 0), tolerance_mib=64)
    assert not ok
    assert "differs by 500 MiB" in reason
