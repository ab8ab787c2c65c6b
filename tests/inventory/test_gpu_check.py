"""The real-GPU check's verdicts, on the fake NVML and on the figures of a run on an H200."""

import json
import shutil
from pathlib import Path

from inventory.agent.gpu_check import (
    add_smi_figures,
    agent_verdict,
    compare,
    folder_broker_batches,
    mps_verdict,
    parse_smi_csv,
    verdict,
)
from inventory.telemetry.collector import NvmlCollector
from inventory.telemetry.fake_nvml import FakeHostState, FakeNvml, FakeProcess
from inventory.telemetry.simulator.catalogue import MIB, build_card, gpu_type

REAL_RUN = Path(__file__).parents[1] / "fixtures" / "nvml-h200"


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
    # A container does not hide its processes' memory from NVML, only its own PID namespace
    # makes NVML's host PIDs differ from the check's.
    assert "PID namespace" in reason and "hide" not in reason


def test_overheads_that_disagree_fail():
    poll = _poll([FakeProcess(101, "python", 1524 * MIB), FakeProcess(102, "python", 3048 * MIB)])
    ok, reason = verdict(compare({101: 1024, 102: 2048}, poll, 0), tolerance_mib=64)
    assert not ok
    assert "differs by 500 MiB" in reason


def test_nvidia_smi_figures_that_disagree_with_nvml_fail():
    poll = _poll([FakeProcess(101, "python", 1542 * MIB), FakeProcess(102, "python", 2566 * MIB)])
    rows = compare({101: 1024, 102: 2048}, poll, 0)
    add_smi_figures(rows, "101, 1542\n102, 2566\n")
    assert verdict(rows, tolerance_mib=64) == (
        True,
        "every process found; context overhead 518-518 MiB and nvidia-smi agrees",
    )
    add_smi_figures(rows, "101, 1542\n102, 1542\n")
    ok, reason = verdict(rows, tolerance_mib=64)
    assert not ok
    assert reason == "nvidia-smi reports other per-process memory for [102]"


def _real_batches():
    return json.loads((REAL_RUN / "agent-batches.json").read_text())


def test_the_agent_batches_of_the_h200_run_kept_the_peak():
    report = json.loads((REAL_RUN / "gpu-check.json").read_text())["agent"]
    ok, reason = agent_verdict(_real_batches(), report["pid"], 1024, 4096, tolerance_mib=64)
    assert ok, reason
    assert reason.startswith("batch 1 kept the 5638 MiB peak as its maximum and 1542 MiB")


def test_a_peak_the_batches_lost_fails():
    batches = _real_batches()
    pid = batches[0]["processes"][0]["pid"]
    row = batches[0]["processes"][0]
    row["used_bytes_max"] = row["used_bytes_last"]  # what averaging or last-value-only gives
    ok, reason = agent_verdict(batches, pid, 1024, 4096, tolerance_mib=64)
    assert not ok
    assert "kept a maximum of 1542 MiB; the peak was 5638 MiB" in reason


def test_a_batch_ending_on_its_peak_fails():
    batches = _real_batches()
    pid = batches[0]["processes"][0]["pid"]
    row = batches[0]["processes"][0]
    row["used_bytes_last"] = row["used_bytes_max"]
    ok, reason = agent_verdict(batches, pid, 1024, 4096, tolerance_mib=64)
    assert not ok
    assert "did not fall inside one interval" in reason


def test_batches_without_the_process_fail():
    ok, reason = agent_verdict(_real_batches(), 1, 1024, 4096, tolerance_mib=64)
    assert (ok, reason) == (False, "no batch holds process 1")


def test_nvidia_smi_csv_of_the_h200_run_parses():
    card = json.loads((REAL_RUN / "gpu-check.json").read_text())["processes"]["nvidia_smi_card"]
    assert parse_smi_csv(card) == [["143771", "616", "7718", "135438"]]


def test_an_mps_client_recorded_twice_fails():
    """The first H200 run recorded the client from both NVML lists; the second, fixed, once."""
    first = json.loads((REAL_RUN / "gpu-check-first-run.json").read_text())["mps"]
    ok, reason = mps_verdict(first["processes"], first["client_pid"])
    assert (ok, reason) == (False, "the client is recorded 2 times: its memory counts twice")
    second = json.loads((REAL_RUN / "gpu-check.json").read_text())["mps"]
    ok, reason = mps_verdict(second["processes"], second["client_pid"])
    assert (ok, reason) == (True, "the client is one MPS process of 1540 MiB")


def test_the_collector_records_an_mps_client_once():
    poll = _poll([FakeProcess(486, "nvidia-cuda-mps-server", 66 * MIB),
                  FakeProcess(482, "python3", 1540 * MIB, kind="mps")])  # fmt: skip
    processes = [
        {"pid": p.pid, "kind": p.kind, "used_mib": p.used_bytes / MIB}
        for p in poll.cards[0].processes
    ]
    assert mps_verdict(processes, 482) == (True, "the client is one MPS process of 1540 MiB")
    assert mps_verdict(processes, 999) == (False, "NVML did not list the client")


def test_the_agent_process_messages_of_the_h200_run_decode_and_kept_the_peak(tmp_path):
    shutil.unpack_archive(REAL_RUN / "agent-broker.tar.gz", tmp_path)
    batches = folder_broker_batches(tmp_path / "queue")
    assert [batch["seq"] for batch in batches] == [1, 2, 3, 4, 5, 6]
    report = json.loads((REAL_RUN / "gpu-check.json").read_text())["agent_process"]
    ok, reason = agent_verdict(batches, report["pid"], 1024, 4096, tolerance_mib=64)
    assert (ok, reason) == (
        True,
        "batch 2 kept the 5638 MiB peak as its maximum and 1542 MiB as its last value (8 polls)",
    )
    mapped = {row["deployment_id"] for batch in batches for row in batch["processes"]}
    assert mapped == {"gpu-check"}


def test_without_a_gpu_every_check_is_skipped_with_its_reason(tmp_path, capsys, monkeypatch):
    from inventory.agent import gpu_check, gpu_check_signals

    monkeypatch.setattr(gpu_check_signals, "gpu_unavailable", lambda: "NVML sees no GPU")
    report = tmp_path / "report.json"
    assert gpu_check.main(["--signals", "--mps", "--json", str(report)]) == 0
    assert "Every check skipped" in capsys.readouterr().out
    assert json.loads(report.read_text()) == {"gpu": {"ok": None, "reason": "NVML sees no GPU"}}
