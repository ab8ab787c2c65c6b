"""A real host's events: exits and restarts from NVML process lists, engine logs, kernel Xids,
all driven through the real collector and agent runtime against the fake NVML."""

import itertools
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import pytest

from inventory.agent import allocator_scrape
from inventory.agent.engine_logs import EngineLogs, FileTail
from inventory.agent.kernel_log import (
    REOPEN_AFTER_S,
    JournalReader,
    KernelXidSource,
    NvmlPciMap,
    open_journal,
    open_kmsg,
)
from inventory.agent.mps import (
    MpsControl,
    MpsMonitor,
    MpsMonitors,
    discover_pipe_dirs,
    running_pipe_dirs,
)
from inventory.agent.runtime import HostRuntime
from inventory.agent.signals import SignalOptions
from inventory.agent.sources import NvmlSource
from inventory.telemetry.collector import NvmlCollector
from inventory.telemetry.fake_nvml import NVML_ERROR_NO_PERMISSION, FakeProcess
from inventory.telemetry.process_events import LifecycleSettings, ProcessLifecycle
from inventory.telemetry.process_mapping import map_processes
from inventory.telemetry.simulator.catalogue import MIB
from inventory.telemetry.xid_events import XID_CATALOGUE, XidDeduplicator
from tests.conftest import FIXTURES
from tests.inventory.telemetry.conftest import h100_card, nvml_for

GIB = 1024 * MIB
KERNEL_FIXTURE = str(FIXTURES / "engine-logs" / "kernel.log")


class Clock:
    def __init__(self, t: float = 1_800_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _plan(entries):
    return {
        "host": "gpu-01",
        "collector": "nvml",
        "sample_interval_s": 1.0,
        "flush_interval_s": 5.0,
        "scrape_interval_s": 3600.0,
        "deployments": entries,
    }


def _entry(card, deployment_id="7", **extra):
    return {"deployment_id": deployment_id, "device_uuids": [card.uuid], "engine": "vllm",
            "process_name_pattern": "python", **extra}  # fmt: skip


# ---- exits and restarts -----------------------------------------------------------------


def _observe(lifecycle, collector, card, clock, plan):
    poll = collector.poll()
    return lifecycle.observe(poll, map_processes(poll.cards, plan).deployments)


def test_a_pid_gone_from_its_card_is_an_exit_with_last_and_peak_memory():
    clock = Clock()
    card = h100_card("gpu-01", 0, [FakeProcess(4242, "python3", 10 * GIB)])
    collector = NvmlCollector(nvml_for(card), "gpu-01", clock=clock, watch_xid=False)
    lifecycle = ProcessLifecycle(LifecycleSettings(exit_grace_s=2.0))
    plan = [_entry(card)]
    for used in (10 * GIB, 30 * GIB, 20 * GIB):
        card.processes[0].used_bytes = used
        assert _observe(lifecycle, collector, card, clock, plan) == []
        clock.t += 1
    card.processes.clear()
    assert _observe(lifecycle, collector, card, clock, plan) == []  # waiting out its grace
    clock.t += 2
    (exit_,) = _observe(lifecycle, collector, card, clock, plan)
    assert exit_.kind == "process_exit" and exit_.card_uuid == card.uuid
    detail = exit_.detail
    assert (detail["pid"], detail["deployment_id"]) == (4242, "7")
    assert (detail["last_used_bytes"], detail["peak_used_bytes"]) == (20 * GIB, 30 * GIB)
    assert detail["probable_oom"] is False and detail["oom_evidence"] == []


def test_an_exit_at_the_cards_capacity_is_a_probable_oom_and_its_replacement_a_restart():
    clock = Clock()
    card = h100_card("gpu-01", 0, [FakeProcess(100, "python3", 1 * GIB)])
    collector = NvmlCollector(nvml_for(card), "gpu-01", clock=clock, watch_xid=False)
    lifecycle = ProcessLifecycle(LifecycleSettings(exit_grace_s=0.0))
    plan = [_entry(card)]
    _observe(lifecycle, collector, card, clock, plan)
    usable = card.total_bytes - card.reserved_bytes - card.base_used_bytes
    card.processes[0].used_bytes = usable - 512 * MIB  # under 3 % of the card left
    clock.t += 1
    _observe(lifecycle, collector, card, clock, plan)
    card.processes[:] = [FakeProcess(200, "python3", 1 * GIB)]
    clock.t += 1
    events = _observe(lifecycle, collector, card, clock, plan)
    kinds = {event.kind: event for event in events}
    assert set(kinds) == {"process_exit", "oom", "process_restart"}
    assert kinds["process_exit"].detail["oom_evidence"] == ["near_capacity"]
    oom = kinds["oom"].detail
    assert oom["source"] == "nvml_exit" and oom["pid"] == 100
    assert [p["pid"] for p in oom["processes"]] == [100]  # the card at its last sample
    restart = kinds["process_restart"].detail
    assert (restart["old_pids"], restart["new_pids"], restart["reason"]) == ([100], [200], "oom")


def test_an_engine_logs_oom_marks_the_exit_and_is_not_counted_twice():
    clock = Clock()
    card = h100_card("gpu-01", 0, [FakeProcess(100, "python3", 1 * GIB)])
    collector = NvmlCollector(nvml_for(card), "gpu-01", clock=clock, watch_xid=False)
    lifecycle = ProcessLifecycle(LifecycleSettings(exit_grace_s=3.0))
    plan = [_entry(card)]
    _observe(lifecycle, collector, card, clock, plan)
    card.processes.clear()
    clock.t += 1
    assert _observe(lifecycle, collector, card, clock, plan) == []
    lifecycle.note_log_oom(clock.t, "7", None)  # the log line arrives within the grace
    clock.t += 3
    (exit_,) = _observe(lifecycle, collector, card, clock, plan)
    assert exit_.detail["oom_evidence"] == ["engine_log"]


def test_a_card_whose_process_list_failed_or_that_was_lost_exits_nobody():
    clock = Clock()
    card = h100_card("gpu-01", 0, [FakeProcess(100, "python3", 1 * GIB)])
    collector = NvmlCollector(nvml_for(card), "gpu-01", clock=clock, watch_xid=False)
    lifecycle = ProcessLifecycle(LifecycleSettings(exit_grace_s=0.0))
    _observe(lifecycle, collector, card, clock, [])
    card.failing["nvmlDeviceGetComputeRunningProcesses"] = NVML_ERROR_NO_PERMISSION
    card.failing["nvmlDeviceGetMPSComputeRunningProcesses"] = NVML_ERROR_NO_PERMISSION
    clock.t += 1
    assert _observe(lifecycle, collector, card, clock, []) == []
    card.failing.clear()
    card.lost = True
    clock.t += 1
    assert _observe(lifecycle, collector, card, clock, []) == []


# ---- kernel log -------------------------------------------------------------------------


def _kmsg_records(lines):
    return "".join(f"4,{n},{n * 1000},-;{line}\n" for n, line in enumerate(lines))


def test_kernel_log_xids_map_to_their_card_by_pci_and_skip_history(tmp_path):
    card = h100_card("gpu-01", 0)
    nvml = nvml_for(card)
    nvml.nvmlInit()
    path = tmp_path / "kmsg"
    path.write_text(_kmsg_records(["NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=old"]))
    source = KernelXidSource([lambda: open_kmsg(str(path))], NvmlPciMap(nvml))
    assert source.read(1.0) == ([], [])  # what was there before the agent is history
    with path.open("a") as kmsg:
        kmsg.write(_kmsg_records([
            "NVRM: Xid (PCI:0000:18:00): 94, pid=4242, name=python3, Contained: SM (0x1). "
            "RST: No, D-RST: No",
        ]) + " SUBSYSTEM=pci\n")  # fmt: skip
    (event,), faults = source.read(2.0)
    assert faults == []
    assert (event.kind, event.card_index, event.card_uuid) == ("xid", 0, card.uuid)
    assert event.detail["xid"] == 94 and event.detail["pid"] == 4242
    assert event.detail["action"] == XID_CATALOGUE[94].action == "restart_app"
    assert event.detail["source"] == "kernel"


def test_an_unreadable_kernel_log_is_said_once_as_a_fault(tmp_path):
    def no_kmsg():
        raise PermissionError(13, "Operation not permitted", "/dev/kmsg")

    def no_journal():
        return open_journal(str(tmp_path / "no-journalctl"))

    source = KernelXidSource([no_kmsg, no_journal], lambda pci: None)
    events, (fault,) = source.read(1.0)
    assert events == [] and fault.call == "kernel_log"
    assert "Operation not permitted" in fault.message and "not found" in fault.message
    assert source.read(2.0) == ([], [])


def test_a_journal_that_keeps_exiting_is_said_once_with_its_reason_and_not_restarted_each_poll(
    tmp_path,
):
    # A pod with the node's journal folder mounted but empty: journalctl starts, says why on
    # stderr and exits, every time it is started.
    fake = tmp_path / "journalctl"
    fake.write_text("#!/bin/sh\necho 'No journal files were found.' >&2\nexit 1\n")
    fake.chmod(0o755)
    now, starts = [0.0], []

    def journal():
        starts.append(now[0])
        return JournalReader([str(fake)])

    source = KernelXidSource([journal], lambda pci: None)
    faults = []
    for second in range(0, 200, 2):
        now[0] = float(second)
        faults += source.read(now[0])[1]
        time.sleep(0.03)  # the started journalctl exits meanwhile
    (fault,) = faults
    assert fault.call == "kernel_log"
    assert fault.message == "journalctl exited with status 1: No journal files were found."
    assert len(starts) >= 2  # it is tried again, but not every poll:
    assert all(b - a >= REOPEN_AFTER_S for a, b in itertools.pairwise(starts))


def test_the_kernel_fixture_through_kmsg_yields_each_real_xid(tmp_path):
    path = tmp_path / "kmsg"
    path.write_text("")
    source = KernelXidSource([lambda: open_kmsg(str(path))], lambda pci: None)
    source.read(0.0)
    text = Path(KERNEL_FIXTURE).read_text()
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    path.write_text(_kmsg_records(lines))
    events, _ = source.read(1.0)
    assert [e.detail["xid"] for e in events] == [31, 31, 62, 45, 45, 31, 79, 79]


def test_xids_seen_by_nvml_and_the_kernel_log_are_one_event_but_repeats_are_not():
    dedup = XidDeduplicator(window_s=30)
    assert dedup.admit("nvml", "GPU-a", 31, 10.0)
    assert not dedup.admit("kernel", "GPU-a", 31, 11.0)
    assert dedup.admit("kernel", "GPU-a", 45, 12.0)
    assert dedup.admit("kernel", "GPU-a", 45, 16.0)  # Xid 45 again: a second Xid
    assert not dedup.admit("nvml", "GPU-a", 45, 16.5)
    assert dedup.admit("nvml", "GPU-a", 31, 100.0)  # long after: a new one


def test_the_xid_table_covers_what_on_call_meets_with_an_action_each():
    required = {13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 109, 119, 120, 140, 154}
    assert required <= set(XID_CATALOGUE)
    actions = {"none", "restart_app", "check_row_remapping", "drain", "reset_gpu", "reboot_node"}
    assert {info.action for info in XID_CATALOGUE.values()} <= actions
    assert XID_CATALOGUE[63].action == "check_row_remapping"
    assert XID_CATALOGUE[95].scope == "gpu" and XID_CATALOGUE[94].scope == "application"


# ---- engine log tails -------------------------------------------------------------------


def test_a_tail_follows_rotation_and_truncation_and_keeps_partial_lines(tmp_path):
    path = tmp_path / "engine.log"
    path.write_text("history\n")
    tail = FileTail(str(path))
    assert tail.read_lines() == []
    with path.open("a") as log:
        log.write("one\ntw")
    assert tail.read_lines() == ["one"]
    with path.open("a") as log:
        log.write("o\nlast of the old file\n")
    os.rename(path, tmp_path / "engine.log.1")
    path.write_text("a new file, with a long first line\n")
    assert tail.read_lines() == ["two", "last of the old file"]
    assert tail.read_lines() == ["a new file, with a long first line"]
    path.write_text("truncated\n")
    assert tail.read_lines() == ["truncated"]


def test_docker_json_file_lines_are_unwrapped(tmp_path):
    path = tmp_path / "container-json.log"
    path.write_text("")
    logs = EngineLogs(idle_flush_s=0.0)
    logs.follow([{"deployment_id": "3", "log_path": str(path), "engine": "vllm"}])
    logs.read(0.0)
    path.write_text(
        '{"log":"ERROR 01-16 17:16:49 [core_client.py:605] Engine core proc EngineCore_DP0 '
        'died unexpectedly, shutting down client.\\n","stream":"stderr",'
        '"time":"2026-01-16T17:16:49.1Z"}\n'
    )
    assert logs.read(1.0) == ([], [])  # the event stays open while its log may go on
    found, problems = logs.read(2.0)  # quiet now: closed
    assert problems == []
    assert [(d, e.kind, e.engine) for d, e in found] == [("3", "engine_died", "vllm")]


# ---- all of it through the agent runtime, on the real NVML code path --------------------


class Sink(list):
    def __call__(self, batch):
        self.append(batch)


@pytest.fixture
def host(tmp_path):
    clock = Clock()
    card = h100_card("gpu-01", 0, [FakeProcess(4242, "python3", 60 * GIB)])
    nvml = nvml_for(card)
    log = tmp_path / "vllm.log"
    log.write_text("")
    sink = Sink()
    options = SignalOptions(lifecycle=LifecycleSettings(exit_grace_s=2.0))
    runtime = HostRuntime("gpu-01", NvmlSource(nvml, clock, options), sink)
    runtime.apply_plan(_plan([_entry(card, log_path=str(log), pids=[4242])]))
    return runtime, clock, card, log, sink


def _tick(runtime, clock, seconds):
    for _ in range(seconds):
        clock.t += 1
        runtime.tick()
        runtime.publish_pending()


def test_an_oom_in_the_engine_log_lands_with_the_cards_processes_and_the_exit_with_it(host):
    runtime, clock, card, log, sink = host
    _tick(runtime, clock, 2)
    with log.open("a") as engine:
        engine.write(
            "(VllmWorker TP0 pid=4242) ERROR 06-05 06:18:13 [x.py:1] torch.OutOfMemoryError: "
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 "
            "GiB of which 1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by "
            "PyTorch, and 5.00 GiB is reserved by PyTorch but unallocated.\n"
        )
    card.processes.clear()
    _tick(runtime, clock, 8)
    events = [event for batch in sink for event in batch["events"]]
    by_kind = {event["kind"]: event for event in events}
    assert sorted(by_kind) == ["oom", "process_exit"]
    oom = by_kind["oom"]
    assert oom["card_uuid"] == card.uuid and oom["detail"]["source"] == "engine_log"
    assert oom["detail"]["requested_bytes"] == 2 * GIB and oom["detail"]["pid"] == 4242
    (process,) = oom["detail"]["processes"]
    assert process["allocator"] == {"allocated_bytes": 70 * GIB, "reserved_bytes": 75 * GIB}
    assert by_kind["process_exit"]["detail"]["oom_evidence"] == ["engine_log"]


# ---- MPS control daemon -----------------------------------------------------------------

FAKE_MPS_CONTROL = str(Path(__file__).with_name("fake_mps") / "nvidia-cuda-mps-control")


def _daemon(pipe_dir, servers):
    (pipe_dir / "daemon.json").write_text(json.dumps({"servers": servers}))


@pytest.fixture
def mps_host(tmp_path):
    clock = Clock()
    server = FakeProcess(900, "nvidia-cuda-mps-server", 300 * MIB)
    clients = [FakeProcess(pid, "python3", 10 * GIB, kind="mps") for pid in (901, 902)]
    cards = [h100_card("gpu-01", 0, [server, *clients]), h100_card("gpu-01", 1, [server])]
    nvml = nvml_for(*cards)
    pipe_dir = tmp_path / "mps"
    pipe_dir.mkdir()
    _daemon(pipe_dir, {"900": [901, 902]})
    monitor = MpsMonitor(MpsControl(FAKE_MPS_CONTROL, str(pipe_dir), timeout_s=10.0))
    sink = Sink()
    options = SignalOptions(lifecycle=LifecycleSettings(exit_grace_s=60.0), mps=monitor)
    runtime = HostRuntime("gpu-01", NvmlSource(nvml, clock, options), sink)
    plan = [
        {"deployment_id": "11", "device_uuids": [cards[0].uuid], "engine": "vllm", "pids": [901]},
        {"deployment_id": "12", "device_uuids": [cards[0].uuid], "engine": "vllm", "pids": [902]},
    ]
    runtime.apply_plan(_plan(plan))
    return runtime, clock, cards, pipe_dir, monitor, sink


def _mps_tick(runtime, clock, monitor):
    monitor.refresh()  # the monitor's thread, between two polls
    _tick(runtime, clock, 1)


def test_an_mps_server_gone_with_its_clients_is_server_down_naming_who_died(mps_host):
    runtime, clock, cards, pipe_dir, monitor, sink = mps_host
    _mps_tick(runtime, clock, monitor)
    (live,) = monitor.live
    assert live["card_uuids"] == [cards[0].uuid, cards[1].uuid]  # a server spans both cards
    assert [c["deployment_id"] for c in live["clients"]] == ["11", "12"]
    _daemon(pipe_dir, {})
    for card in cards:
        card.processes.clear()
    _mps_tick(runtime, clock, monitor)
    runtime.flush(clock.t)
    runtime.publish_pending()
    (down,) = [e for b in sink for e in b["events"] if e["kind"] == "mps_server_down"]
    assert down["detail"]["cause"] == "server_exited" and down["detail"]["server_pid"] == 900
    assert [(c["pid"], c["deployment_id"]) for c in down["detail"]["clients"]] == [
        (901, "11"),
        (902, "12"),
    ]
    assert down["card_uuid"] == cards[0].uuid


class TornAnswers(MpsControl):
    """A daemon whose server dies between the question for the servers and the one for its
    clients, as it does when the crash lands between the agent's two calls."""

    def __init__(self, answers):
        super().__init__()
        self.answers = iter(answers)

    def ask(self, command):
        expected, answer = next(self.answers)
        assert command == expected
        return answer

    def statuses(self, servers):
        return dict.fromkeys(servers)  # a daemon too old to tell


def test_a_server_dying_between_the_daemons_two_answers_is_still_down_with_its_clients():
    monitor = MpsMonitor(
        TornAnswers(
            [
                ("get_server_list", "900\n"),
                ("get_client_list 900", "901\n902\n"),
                ("get_server_list", "900\n"),  # torn: listed, its clients already gone
                ("get_client_list 900", ""),
                ("get_server_list", ""),  # looked for again: gone
            ]
        )
    )
    poll = NvmlCollector(nvml_for(h100_card("h", 0)), "h", watch_xid=False).poll()
    monitor.refresh()
    assert monitor.poll(1.0, poll, {}) == ([], [])
    monitor.refresh()
    (down,), _ = monitor.poll(2.0, poll, {})
    assert down.kind == "mps_server_down" and down.detail["cause"] == "server_exited"
    assert [c["pid"] for c in down.detail["clients"]] == [901, 902]


def test_a_server_still_listed_without_clients_is_idle_not_down():
    monitor = MpsMonitor(
        TornAnswers(
            [
                ("get_server_list", "900\n"),
                ("get_client_list 900", "901\n"),
                ("get_server_list", "900\n"),
                ("get_client_list 900", ""),
                ("get_server_list", "900\n"),  # still there: its client left, it did not die
            ]
        )
    )
    poll = NvmlCollector(nvml_for(h100_card("h", 0)), "h", watch_xid=False).poll()
    monitor.refresh()
    monitor.poll(1.0, poll, {})
    monitor.refresh()
    assert monitor.poll(2.0, poll, {}) == ([], [])
    assert [s["server_pid"] for s in monitor.live] == [900]


def test_a_daemon_that_stops_answering_takes_its_servers_clients_down_once(mps_host):
    runtime, clock, _, pipe_dir, monitor, sink = mps_host
    _mps_tick(runtime, clock, monitor)
    (pipe_dir / "hang").write_text("")
    _mps_tick(runtime, clock, monitor)
    _mps_tick(runtime, clock, monitor)
    runtime.flush(clock.t)
    runtime.publish_pending()
    downs = [e for b in sink for e in b["events"] if e["kind"] == "mps_server_down"]
    assert [d["detail"]["cause"] for d in downs] == ["daemon_not_answering"]
    faults = [f for b in sink for f in b["faults"] if f["call"] == "mps_control"]
    assert faults and "TimeoutExpired" in faults[0]["message"]


def test_a_server_that_refuses_new_clients_is_down_with_the_clients_it_took(mps_host):
    runtime, clock, _, pipe_dir, monitor, sink = mps_host
    _mps_tick(runtime, clock, monitor)
    (live,) = monitor.live
    assert live["status"] == "ACTIVE" and live["pipe_dir"] == str(pipe_dir)
    # A client's fatal fault: the server stays, listed, but takes no new client.
    (pipe_dir / "daemon.json").write_text(
        json.dumps({"servers": {"900": [901, 902]}, "status": {"900": "FAULT"}})
    )
    _mps_tick(runtime, clock, monitor)
    _mps_tick(runtime, clock, monitor)
    runtime.flush(clock.t)
    runtime.publish_pending()
    downs = [e for b in sink for e in b["events"] if e["kind"] == "mps_server_down"]
    assert [d["detail"]["cause"] for d in downs] == ["server_faulted"]  # once
    assert [c["pid"] for c in downs[0]["detail"]["clients"]] == [901, 902]
    assert downs[0]["detail"]["pipe_dir"] == str(pipe_dir)
    assert monitor.live[0]["status"] == "FAULT"


def test_every_control_daemon_is_watched_and_a_crash_names_only_its_own_clients(tmp_path):
    dirs = [tmp_path / "mps-0", tmp_path / "mps-1"]
    for pipe_dir, (server, client) in zip(dirs, [(900, 901), (910, 911)], strict=True):
        pipe_dir.mkdir()
        _daemon(pipe_dir, {str(server): [client]})
    monitors = MpsMonitors(
        [str(d) for d in dirs], proc=str(tmp_path / "no-proc"), binary=FAKE_MPS_CONTROL
    )
    clients = [FakeProcess(pid, "python3", GIB, kind="mps") for pid in (901, 911)]
    servers = [FakeProcess(pid, "nvidia-cuda-mps-server", 300 * MIB) for pid in (900, 910)]
    cards = [
        h100_card("h", 0, [servers[0], clients[0]]),
        h100_card("h", 1, [servers[1], clients[1]]),
    ]
    collector = NvmlCollector(nvml_for(*cards), "h", watch_xid=False)
    monitors.refresh()
    monitors.poll(1.0, collector.poll(), {})
    assert sorted((s["pipe_dir"], s["server_pid"]) for s in monitors.live) == [
        (str(dirs[0]), 900),
        (str(dirs[1]), 910),
    ]
    _daemon(dirs[1], {})  # the second GPU's daemon loses its server
    monitors.refresh()
    (down,), _ = monitors.poll(2.0, collector.poll(), {})
    assert down.detail["pipe_dir"] == str(dirs[1]) and down.card_index == 1
    assert [c["pid"] for c in down.detail["clients"]] == [911]


def test_the_running_daemons_pipe_directories_come_from_their_environment(tmp_path):
    def process(pid: int, argv0: str, environ: bytes | None) -> None:
        folder = tmp_path / str(pid)
        folder.mkdir()
        (folder / "cmdline").write_bytes(argv0.encode() + b"\0-d\0")
        if environ is None:
            (folder / "environ").mkdir()  # unreadable, as another user's environment is
        else:
            (folder / "environ").write_bytes(environ)

    process(10, "/usr/bin/nvidia-cuda-mps-control", b"CUDA_MPS_PIPE_DIRECTORY=/run/mps-0\0X=1\0")
    process(11, "nvidia-cuda-mps-control", b"HOME=/root\0")  # the default directory
    process(12, "/usr/bin/nvidia-cuda-mps-control", None)
    process(13, "/usr/bin/python3", b"CUDA_MPS_PIPE_DIRECTORY=/run/not-a-daemon\0")
    (tmp_path / "self").mkdir()
    found, unreadable = running_pipe_dirs(str(tmp_path))
    assert sorted(found) == ["/run/mps-0", "/tmp/nvidia-mps"] and unreadable == [12]
    monitors = MpsMonitors(["/run/mps-0"], proc=str(tmp_path))
    _, faults = monitors.poll(
        1.0, NvmlCollector(nvml_for(h100_card("h", 0)), "h", watch_xid=False).poll(), {}
    )
    assert sorted(monitors.monitors) == ["/run/mps-0", "/tmp/nvidia-mps"]
    (fault,) = [f for f in faults if f.error == "EnvironUnreadable"]
    assert "pid 12" in fault.message and "AGENT_MPS_PIPE_DIRS" in fault.message


def test_a_daemon_found_unreadable_at_start_is_said_at_the_first_poll_once(tmp_path):
    # The agent starts its monitors (a rescan) before it polls: that rescan's fault is kept.
    (tmp_path / "12").mkdir()
    (tmp_path / "12" / "cmdline").write_bytes(b"nvidia-cuda-mps-control\0-d\0")
    (tmp_path / "12" / "environ").mkdir()  # unreadable, as another user's environment is
    monitors = MpsMonitors([], proc=str(tmp_path), binary=FAKE_MPS_CONTROL)
    monitors.refresh()
    poll = NvmlCollector(nvml_for(h100_card("h", 0)), "h", watch_xid=False).poll()
    _, faults = monitors.poll(1.0, poll, {})
    assert [f.error for f in faults] == ["EnvironUnreadable"] and "pid 12" in faults[0].message
    assert monitors.poll(2.0, poll, {}) == ([], [])


def test_no_mps_daemon_on_a_host_is_one_fault_and_no_event(tmp_path):
    monitor = MpsMonitor(MpsControl(FAKE_MPS_CONTROL, str(tmp_path / "absent")))
    monitor.refresh()
    poll = NvmlCollector(nvml_for(h100_card("h", 0)), "h", watch_xid=False).poll()
    events, (fault,) = monitor.poll(1.0, poll, {})
    assert events == [] and "no MPS pipe directory" in fault.message
    monitor.refresh()
    assert monitor.poll(2.0, poll, {}) == ([], [])


def test_the_allocator_figures_in_a_batch_keep_the_intervals_peaks():
    clock = Clock()
    card = h100_card("gpu-01", 0, [FakeProcess(4242, "python3", 50 * GIB)])
    reserved = iter([30, 45, 35, 20, 20, 20, 20, 20, 20, 20, 20, 20])

    class Exporter(NvmlSource):
        def fetch(self, url, timeout):
            if not url.startswith("http://127.0.0.1:9464/"):
                raise OSError("connection refused")  # no second serving process
            value = next(reserved) * GIB
            return (
                f'torch_cuda_allocator_reserved_bytes{{pid="4242",device="0"}} {value}\n'
                f'torch_cuda_allocator_allocated_bytes{{pid="4242",device="0"}} {value // 2}\n'
            )

    sink = Sink()
    runtime = HostRuntime("gpu-01", Exporter(nvml_for(card), clock), sink)
    plan = _plan([_entry(card, allocator_url="http://127.0.0.1:9464/metrics")])
    runtime.apply_plan({**plan, "scrape_interval_s": 1.0})
    _tick(runtime, clock, 11)
    first, second = (batch["processes"][0]["allocator"] for batch in sink[:2])
    assert (first["reserved_bytes_max"], first["reserved_bytes"]) == (45 * GIB, 20 * GIB)
    assert second["reserved_bytes_max"] == 20 * GIB  # a new interval, its own peak


def test_the_allocator_snapshot_folder_lands_in_the_batch_under_the_nvml_pid(tmp_path):
    clock = Clock()
    # This test's own process stands for the engine: NVML lists it, /proc knows it.
    card = h100_card("gpu-01", 0, [FakeProcess(os.getpid(), "python3", 50 * GIB)])
    ((ns_pid, started),) = allocator_scrape.host_processes({os.getpid()})
    row = {"pid": ns_pid, "device": 0, "largest_free_block_bytes": None,
           "memory_stats": {"reserved_bytes.all.current": 45 * GIB,
                            "allocated_bytes.all.current": 30 * GIB}}  # fmt: skip
    (tmp_path / f"{ns_pid}-{started}.json").write_text(json.dumps({"rows": [row]}))
    (tmp_path / f"{ns_pid + 1}-{started}.json").write_text("{")  # no such process: unread
    sink = Sink()
    source = NvmlSource(nvml_for(card), clock, allocator_dir=tmp_path)
    runtime = HostRuntime("gpu-01", source, sink)
    runtime.apply_plan({**_plan([_entry(card)]), "scrape_interval_s": 1.0})
    _tick(runtime, clock, 6)
    (process,) = sink[0]["processes"]
    assert process["pid"] == os.getpid()
    assert process["allocator"]["reserved_bytes_max"] == 45 * GIB
    assert process["allocator"]["allocated_bytes"] == 30 * GIB
    (tmp_path / f"{ns_pid}-{started}.json").write_text("{")
    _tick(runtime, clock, 5)
    faults = [f for f in sink[1]["faults"] if f["call"] == "scrape:allocator"]
    assert faults and f"host pid {os.getpid()}" in faults[0]["message"]


# ---- engine metrics ---------------------------------------------------------------------


def _vllm_metrics(start, preemptions, waiting):
    return (
        "# TYPE process_start_time_seconds gauge\n"
        f"process_start_time_seconds {start}\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} 4.0\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{model_name="m"}} {waiting}\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{model_name="m"} 0.97\n'
        "# TYPE vllm:num_preemptions counter\n"
        f'vllm:num_preemptions_total{{model_name="m"}} {preemptions}\n'
    )


def test_engine_metrics_tell_restarts_and_kv_pressure_once_each():
    clock = Clock()
    card = h100_card("gpu-01", 0, [FakeProcess(4242, "python3", 50 * GIB)])
    scrapes = iter(
        [(1000.0, 0, 0), (1000.0, 0, 0), (1000.0, 5, 0), (1000.0, 9, 0), (2000.0, 0, 0)]
        + [(2000.0, 0, 0)] * 20
    )

    class Engine(NvmlSource):
        def fetch(self, url, timeout):
            return _vllm_metrics(*next(scrapes))

    sink = Sink()
    runtime = HostRuntime("gpu-01", Engine(nvml_for(card), clock), sink)
    plan = _plan([_entry(card, metrics_url="http://127.0.0.1:8000/metrics")])
    runtime.apply_plan({**plan, "scrape_interval_s": 1.0})
    _tick(runtime, clock, 11)
    events = [(e["kind"], e["detail"].get("reason")) for b in sink for e in b["events"]]
    assert events == [("kv_pressure", "preemptions"), ("process_restart", "engine_restarted")]
    pressure = next(e for b in sink for e in b["events"] if e["kind"] == "kv_pressure")
    assert pressure["detail"]["preemptions"] == 5 and pressure["detail"]["deployment_id"] == "7"


# ---- real hosts as they are -------------------------------------------------------------

CONTAINER = "3f4e2a1b" * 8


def _proc(tmp_path, pid, cgroup, nspid):
    folder = tmp_path / "proc" / str(pid)
    folder.mkdir(parents=True)
    (folder / "cgroup").write_text(cgroup)
    (folder / "status").write_text(f"Name:\tpython3\nNSpid:\t{nspid}\nPPid:\t1\n")
    return tmp_path / "proc"


def test_container_pids_map_to_their_deployment_through_proc(tmp_path):
    from inventory.telemetry.containers import container_of

    proc = _proc(tmp_path, 4242, f"0::/system.slice/docker-{CONTAINER}.scope\n", "4242\t1")
    pod = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_5e6f_" \
          f"7081_92a3_b4c5d6e7f809.slice/cri-containerd-{'9' * 64}.scope\n"  # fmt: skip
    _proc(tmp_path, 4343, pod, "4343\t7")
    _proc(tmp_path, 4444, "12:memory:/user.slice\n", "4444")
    docker = container_of(4242, proc)
    assert (docker.container_id, docker.namespace_pid, docker.pod_uid) == (CONTAINER, 1, None)
    assert container_of(4343, proc).pod_uid == "1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809"
    assert container_of(4444, proc) is None and container_of(1, proc) is None

    clock = Clock()
    card = h100_card("gpu-01", 0, [FakeProcess(4242, None, 10 * GIB),
                                   FakeProcess(4343, None, 10 * GIB)])  # fmt: skip
    sink = Sink()
    runtime = HostRuntime(
        "gpu-01", NvmlSource(nvml_for(card), clock, SignalOptions(proc=proc)), sink
    )
    runtime.apply_plan(_plan([
        {"deployment_id": "1", "device_uuids": [card.uuid], "container_ids": [CONTAINER]},
        {"deployment_id": "2", "device_uuids": [card.uuid],
         "pod_uid": "1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809"},
    ]))  # fmt: skip
    _tick(runtime, clock, 6)
    rows = {row["pid"]: row["deployment_id"] for row in sink[0]["processes"]}
    assert rows == {4242: "1", 4343: "2"}


def test_mig_processes_hidden_without_root_are_reported_once():
    from tests.inventory.telemetry.conftest import h200_mig_card

    clock = Clock()
    card = h200_mig_card("gpu-01", 0)
    card.processes.clear()  # what a non-root agent sees
    for mig in card.mig_devices:
        mig.base_used_bytes = 2 * GIB
    sink = Sink()
    options = SignalOptions(is_root=False)
    runtime = HostRuntime("gpu-01", NvmlSource(nvml_for(card), clock, options), sink)
    runtime.apply_plan(_plan([]))
    _tick(runtime, clock, 6)
    (fault,) = [f for f in sink[0]["faults"] if f["call"] == "privileges"]
    assert fault["count"] == 1 and "root" in fault["message"]


def test_a_driver_library_mismatch_and_a_gpu_needing_reset_are_host_faults_in_words():
    from inventory.telemetry.fake_nvml import (
        NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        NVML_ERROR_RESET_REQUIRED,
    )

    card = h100_card("gpu-01", 0)
    nvml = nvml_for(card)
    nvml.state.init_error = NVML_ERROR_LIB_RM_VERSION_MISMATCH
    collector = NvmlCollector(nvml, "gpu-01", watch_xid=False)
    (fault,) = collector.poll().faults
    assert fault.error == "NVMLError_LibRmVersionMismatch" and "reboot" in fault.message
    nvml.state.init_error = None
    assert collector.poll().cards[0].total_bytes == card.total_bytes
    card.failing["nvmlDeviceGetMemoryInfo"] = NVML_ERROR_RESET_REQUIRED
    calls = []
    original = nvml.nvmlDeviceGetHandleByIndex
    nvml.nvmlDeviceGetHandleByIndex = lambda index: calls.append(index) or original(index)
    polls = [collector.poll() for _ in range(5)]
    assert calls == []  # the card is kept, not forgotten and looked up again each poll
    assert all(p.cards[0].uuid == card.uuid for p in polls)
    assert all("needs a reset" in p.faults[0].message for p in polls)


def test_a_mig_instance_created_beside_running_ones_is_found_within_n_polls():
    from inventory.telemetry import collector as collector_module
    from tests.inventory.telemetry.conftest import h200_mig_card

    card = h200_mig_card("gpu-01", 0)
    created = card.mig_devices.pop()
    collector = NvmlCollector(nvml_for(card), "gpu-01", watch_xid=False)
    before = len(collector.poll().cards[0].mig_devices)
    card.mig_devices.append(created)
    counts = [
        len(collector.poll().cards[0].mig_devices)
        for _ in range(collector_module.MIG_REDISCOVER_POLLS + 1)
    ]
    assert counts[0] == before and counts[-1] == before + 1


def test_an_agent_stopping_keeps_the_oom_its_engine_log_was_still_writing(tmp_path):
    from inventory.agent.runtime import Agent

    clock = Clock()
    card = h100_card("gpu-01", 0, [FakeProcess(4242, "python3", 60 * GIB)])
    log = tmp_path / "engine.log"
    log.write_text("")
    sink = Sink()
    agent = Agent(lambda plan: NvmlSource(nvml_for(card), clock, SignalOptions()), sink)
    agent.apply_plan(_plan([_entry(card, log_path=str(log), pids=[4242])]))
    runtime = agent.hosts["gpu-01"]
    _tick(runtime, clock, 1)
    log.write_text("RuntimeError: CUDA error: out of memory\n")
    _tick(runtime, clock, 1)  # read, but still open: its traceback might go on
    agent.stop()
    (oom,) = [e for b in sink for e in b["events"] if e["kind"] == "oom"]
    assert oom["detail"]["deployment_id"] == "7" and oom["detail"]["pid"] == 4242


def test_a_driver_without_memory_v2_is_read_through_v1():
    from inventory.telemetry.fake_nvml import NVML_ERROR_FUNCTION_NOT_FOUND, NVMLError

    card = h100_card("gpu-01", 0, [FakeProcess(4242, "python3", 10 * GIB)])
    nvml = nvml_for(card)
    v2_calls = []

    def memory_info(handle, version=None):
        if version is not None:
            v2_calls.append(version)
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        return type(nvml).nvmlDeviceGetMemoryInfo(nvml, handle)

    nvml.nvmlDeviceGetMemoryInfo = memory_info
    collector = NvmlCollector(nvml, "gpu-01", watch_xid=False)
    first, second = collector.poll(), collector.poll()
    assert len(v2_calls) == 1  # asked once, then v1 only
    reading = second.cards[0]
    assert reading.total_bytes == card.total_bytes and reading.reserved_bytes is None
    assert reading.used_bytes + reading.free_bytes == card.total_bytes
    assert first.faults == [] and second.faults == []


def test_a_systemd_units_journal_is_followed_without_blocking(tmp_path, monkeypatch):
    import time

    journal = Path(__file__).with_name("fake_journal")
    monkeypatch.setenv("PATH", f"{journal}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_JOURNAL_DIR", str(tmp_path))
    (tmp_path / "vllm-chat.service").write_text("old line\n")
    logs = EngineLogs(idle_flush_s=0.0)
    logs.follow([{"deployment_id": "5", "log_path": "journald:vllm-chat.service"}])
    assert logs.read(0.0) == ([], [])
    following = tmp_path / "vllm-chat.service.following"
    deadline = time.monotonic() + 30
    while not following.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the follower is not at the end of the journal yet
    with (tmp_path / "vllm-chat.service").open("a") as unit:
        unit.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n")
    deadline = time.monotonic() + 10
    found = []
    while not found and time.monotonic() < deadline:
        found += logs.read(time.monotonic())[0]
        time.sleep(0.1)
    logs.close()
    assert [(d, e.kind, e.detail["requested_bytes"]) for d, e in found] == [("5", "oom", GIB)]


def test_a_driver_fault_without_an_xid_is_a_gpu_lost_event_for_its_card(tmp_path):
    clock = Clock()
    card = h100_card("gpu-01", 0)
    nvml = nvml_for(card)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    kernel = KernelXidSource([lambda: open_kmsg(str(kmsg))], NvmlPciMap(nvml))
    sink = Sink()
    runtime = HostRuntime("gpu-01", NvmlSource(nvml, clock, SignalOptions(kernel_log=kernel)), sink)
    runtime.apply_plan(_plan([]))
    _tick(runtime, clock, 2)
    with kmsg.open("a") as log:
        log.write(_kmsg_records([
            "NVRM: GPU 0000:18:00.0: RmInitAdapter failed! (0x24:0x72:1568)",
            "NVRM: GPU 0000:18:00.0: rm_init_adapter failed, device minor number 0",
            "NVRM: Xid (PCI:0000:18:00): 31, pid=4242, name=python3, Ch 00000010",
            "NVRM: _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 3856513292 "
            "heartbeat 0 heartbeatWithOffsetMs 0 diff 3856513292 timeout 5200",
            "NVRM: _kgspRpcRecvPoll: GSP RM heartbeat timed out",
        ]))  # fmt: skip
    _tick(runtime, clock, 8)
    events = [event for batch in sink for event in batch["events"]]
    assert sorted(
        (e["kind"], e["detail"].get("reason"), e["detail"].get("xid")) for e in events
    ) == [
        ("gpu_lost", "gsp_heartbeat_timeout", None),
        ("gpu_lost", "rm_init_failed", None),
        ("xid", None, 31),
    ]
    (init_failed,) = [e for e in events if e["detail"].get("reason") == "rm_init_failed"]
    assert init_failed["card_uuid"] == card.uuid and init_failed["card_index"] == 0
    assert init_failed["detail"]["source"] == "kernel"
    assert init_failed["detail"]["pci_bus_id"] == "0000:18:00"
    (heartbeat,) = [e for e in events if e["detail"].get("reason") == "gsp_heartbeat_timeout"]
    assert heartbeat.get("card_index") is None  # the line names no card


def _control_socket(pipe_dir: Path) -> socket.socket:
    """A daemon's `control` socket in its pipe directory, as nvidia-cuda-mps-control -d makes."""
    pipe_dir.mkdir(parents=True, exist_ok=True)
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(pipe_dir / "control"))
    return listening


@pytest.fixture
def short_dir():
    """A folder of a short path: a Unix socket's path has at most 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="mps-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_pipe_directories_are_found_by_their_control_socket_under_a_glob(tmp_path, short_dir):
    """AGENT_MPS_PIPE_GLOB: each match holding a `control` socket (or FIFO) is a daemon's pipe
    directory; a folder without one, a plain file or a link named `control` are not."""
    parent = short_dir / "nvidia-mps"
    sockets = [_control_socket(parent / f"gpu{i}") for i in (0, 1)]
    (parent / "gpu2").mkdir()
    os.mkfifo(parent / "gpu2" / "control")
    (parent / "stale").mkdir()
    (parent / "stale" / "control").write_text("")  # a plain file
    (parent / "linked").mkdir()
    (parent / "linked" / "control").symlink_to(parent / "gpu0" / "control")
    (parent / "empty").mkdir()
    try:
        found = discover_pipe_dirs([f"{parent}/*", f"{parent}/gpu0"])
    finally:
        for listening in sockets:
            listening.close()
    assert found == [str(parent / "gpu0"), str(parent / "gpu1"), str(parent / "gpu2")]
    assert discover_pipe_dirs([str(tmp_path / "absent" / "*")]) == []


def test_daemons_whose_environment_is_closed_are_watched_by_the_glob_and_named_when_it_is_short(
    tmp_path, short_dir
):
    """As the DaemonSet's pod: no daemon's environment can be read, their pipe directories are
    found by the glob and asked; only a daemon more than the glob found is named."""
    proc, parent = tmp_path / "proc", short_dir / "nvidia-mps"
    (proc / "self").mkdir(parents=True)
    for pid in (12, 13):
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "cmdline").write_bytes(b"nvidia-cuda-mps-control\0-d\0")
        (proc / str(pid) / "environ").mkdir()  # unreadable, as to a pod without capabilities
    sockets = [_control_socket(parent / f"gpu{i}") for i in (0, 1)]
    _daemon(parent / "gpu0", {"900": [901]})
    _daemon(parent / "gpu1", {"910": [911]})
    poll = NvmlCollector(nvml_for(h100_card("h", 0)), "h", watch_xid=False).poll()
    try:
        monitors = MpsMonitors([], globs=[f"{parent}/*"], proc=str(proc), binary=FAKE_MPS_CONTROL)
        monitors.refresh()
        _, faults = monitors.poll(1.0, poll, {})
        assert faults == [], "two daemons, two directories found"
        assert sorted((s["pipe_dir"], s["server_pid"]) for s in monitors.live) == [
            (str(parent / "gpu0"), 900), (str(parent / "gpu1"), 910)]  # fmt: skip
        (proc / "14").mkdir()  # a third daemon, its directory elsewhere
        (proc / "14" / "cmdline").write_bytes(b"nvidia-cuda-mps-control\0-d\0")
        (proc / "14" / "environ").mkdir()
        short = MpsMonitors([], globs=[f"{parent}/*"], proc=str(proc), binary=FAKE_MPS_CONTROL)
        short.refresh()
        _, faults = short.poll(1.0, poll, {})
    finally:
        for listening in sockets:
            listening.close()
    assert sorted(f.error for f in faults) == ["EnvironUnreadable"] * 3
    assert all("AGENT_MPS_PIPE_GLOB" in f.message and "2 directories" in f.message for f in faults)
