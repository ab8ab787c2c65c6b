"""Drivers older than nvidia-ml-py: a process list's newer version missing is read through an
older one, and a library that has none is a named fault on a card that stays known.

Against the project's fake NVML (which can serve a _v2 list) and against NVIDIA's own mock NVML
through the real binding (which serves _v3 only and answers _v2 NOT_SUPPORTED)."""

import json
import os
import subprocess
import sys

from inventory.telemetry import fake_nvml
from inventory.telemetry.collector import LIBRARY_MISMATCH, NvmlCollector
from inventory.telemetry.fake_nvml import FakeHostState, FakeNvml, FakeProcess
from tests.inventory.telemetry.conftest import MIB, h100_card
from tests.mock_nvml import CHECKOUT, mock_nvml  # noqa: F401 (a fixture)

COMPUTE_V3 = "nvmlDeviceGetComputeRunningProcesses_v3"
COMPUTE_V2 = "nvmlDeviceGetComputeRunningProcesses_v2"
MPS_V3 = "nvmlDeviceGetMPSComputeRunningProcesses_v3"
MPS_V2 = "nvmlDeviceGetMPSComputeRunningProcesses_v2"


class _CountingNvml(FakeNvml):
    discoveries = 0

    def nvmlDeviceGetHandleByIndex(self, index):
        self.discoveries += 1
        return super().nvmlDeviceGetHandleByIndex(index)


def _collector(missing: set[str]):
    card = h100_card("old", 0, [FakeProcess(41, "python3", 900 * MIB)])
    nvml = _CountingNvml(FakeHostState([card], missing_functions=frozenset(missing)))
    return NvmlCollector(nvml, "old", clock=lambda: 1000.0), nvml


def test_the_unversioned_call_of_an_older_library_is_a_mismatch_not_an_nvml_error():
    _, nvml = _collector({COMPUTE_V3})
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    try:
        nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception as error:
        assert type(error).__name__ == "NVMLLibraryMismatchError"
        assert not isinstance(error, fake_nvml.NVMLError)
    else:
        raise AssertionError("an older library answered the unversioned call")
    assert [p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses_v2(handle)] == [41]


def test_without_v3_the_processes_are_read_through_v2_said_once():
    collector, nvml = _collector({COMPUTE_V3, MPS_V3})
    first, second = collector.poll(), collector.poll()
    assert [p.pid for p in first.cards[0].processes] == [41]
    assert [p.pid for p in second.cards[0].processes] == [41]
    assert sorted((f.call, f.error) for f in first.faults) == [
        (COMPUTE_V3, LIBRARY_MISMATCH), (MPS_V3, LIBRARY_MISMATCH)
    ]  # fmt: skip
    assert "_v2 is read instead" in first.faults[0].message
    assert second.faults == []
    assert nvml.discoveries == 1  # the card is kept, not discovered again each poll


def test_a_library_with_no_version_of_the_list_keeps_the_card_and_says_so():
    collector, nvml = _collector({COMPUTE_V3, COMPUTE_V2, MPS_V3, MPS_V2})
    polls = [collector.poll() for _ in range(3)]
    assert all(p.cards[0].used_bytes is not None for p in polls)  # memory still read
    assert all(p.cards[0].processes == [] for p in polls)
    calls = [f.call for f in polls[0].faults]
    assert calls == [COMPUTE_V3, COMPUTE_V2, MPS_V3, MPS_V2]
    assert "cannot be read" in polls[0].faults[1].message
    assert polls[1].faults == polls[2].faults == []
    assert "nvmlDeviceGetComputeRunningProcesses" in polls[2].cards[0].unsupported
    assert nvml.discoveries == 1


def test_a_mismatch_on_any_other_call_is_a_named_fault_and_the_card_stays():
    collector, nvml = _collector(set())

    def older_utilization(handle):
        raise fake_nvml.NVMLLibraryMismatchError("Unversioned function called ...")

    nvml.nvmlDeviceGetUtilizationRates = older_utilization
    first, second = collector.poll(), collector.poll()
    assert [(f.call, f.error) for f in first.faults] == [
        ("nvmlDeviceGetUtilizationRates", LIBRARY_MISMATCH)
    ]
    assert [p.pid for p in second.cards[0].processes] == [41]
    assert second.faults == [] and nvml.discoveries == 1


def _polls_through_the_mock(mock, *hidden: str, polls: int = 2) -> list[dict]:
    argv = [sys.executable, "-m", "tests.inventory.telemetry.poll_real_nvml", "--polls",
            str(polls), "--hide", *hidden]  # fmt: skip
    done = subprocess.run(
        argv, cwd=CHECKOUT, env={**os.environ, **mock.env},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_nvidias_mock_serves_the_processes_through_v3(mock_nvml):  # noqa: F811
    first, second = _polls_through_the_mock(mock_nvml)
    card0 = first["cards"][0]
    assert card0["uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    assert card0["pids"] == [4242]  # the compute process; Xorg (graphics) is no tenant
    assert second["cards"][0]["pids"] == [4242]


def test_nvidias_mock_without_v3_keeps_its_cards_and_names_the_missing_call(mock_nvml):  # noqa: F811
    first, second, third = _polls_through_the_mock(mock_nvml, COMPUTE_V3, MPS_V3, polls=3)
    missing = [(f[0], f[1], f[2]) for f in first["faults"] if f[2] == LIBRARY_MISMATCH]
    assert (0, COMPUTE_V3, LIBRARY_MISMATCH) in missing
    # the mock answers _v2 NOT_SUPPORTED: the list is a capability this card lacks, said once
    assert not [f for f in second["faults"] + third["faults"] if f[2] == LIBRARY_MISMATCH]
    for poll in (first, second, third):
        card0 = poll["cards"][0]
        assert card0["uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
        assert card0["used_bytes"] == 4294967296 and card0["pids"] == []
    assert "nvmlDeviceGetComputeRunningProcesses" in third["cards"][0]["unsupported"]
