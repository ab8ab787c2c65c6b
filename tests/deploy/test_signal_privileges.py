"""The kernel log's Xids as the shipped unit grants them: the installed agent's kernel-log source
run as the unit's user with exactly the unit's capabilities and groups (setpriv), on this
machine's kernel, its real /dev/kmsg and kernel.dmesg_restrict=1. With the grant an NVRM line
written to the kernel log arrives as an Xid; without it, the source says by name what to grant.

MPS control and engine logs need no grant of the unit's own: as its user, a control daemon
of the agent's group is found through its environment and asked, a readable engine log's OOM
arrives; a root-only daemon and log are each named as a fault.

The DaemonSet's pod (uid 0, every capability dropped, no new privileges; setpriv) is proven the
same way with its mounts emulated: the kernel log through a real journald's journal mounted
read-only, a root daemon's listed pipe directory and a root log; another user's are named.

The event set's Xids, both ways, on NVIDIA's mock NVML: as the unit's user an Xid arrives, and a
refused registration is named for each card. The other NVML signals (memory, processes, a lost
card) are proven as the unit's user by the mock NVML rehearsal
(test_mock_nvml_rehearsal_e2e.py); docs/deploy.md's table "Signals and privileges" lists every
signal with its grant and its test.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.deploy.as_the_unit import UNIT_GID, UNIT_UID, unit_command, unit_grants

READER = """
import json, sys, time
from inventory.agent.kernel_log import KernelXidSource, open_journal, open_kmsg
source = KernelXidSource([open_kmsg, open_journal], lambda pci: None)
deadline = time.time() + float(sys.argv[1])
first = True
while time.time() < deadline:
    events, faults = source.read(time.time())
    for fault in faults:
        print(json.dumps({"fault": [fault.call, fault.error, fault.message]}), flush=True)
    for event in events:
        print(json.dumps({"xid": event.detail}), flush=True)
    if first:
        print(json.dumps({"ready": source.via}), flush=True)
        first = False
    time.sleep(0.1)
"""

NVRM = "NVRM: Xid (PCI:0000:0f:00): 48, pid=4242, name=python3, DBE (double bit error) ECC"


def _restricted_kernel_log() -> bool:
    try:
        return Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1"
    except OSError:
        return False


needs_root_and_restriction = pytest.mark.skipif(
    os.geteuid() != 0 or not _restricted_kernel_log(),
    reason="needs root (to drop to the unit's user and write to /dev/kmsg) and "
    "kernel.dmesg_restrict=1 (else anyone reads the kernel log)",
)


def _read_as_the_unit(agent_venv, capabilities, seconds: float, write: str | None):
    work = Path(tempfile.mkdtemp(prefix="kernel-log-"))
    work.chmod(0o755)
    _, groups = unit_grants()
    command, env, who = unit_command(agent_venv, work, capabilities, groups)
    reader = subprocess.Popen(
        [*command, "-c", READER, str(seconds)],
        cwd=work,
        env={"PATH": os.environ["PATH"], "LANG": "C.UTF-8", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in reader.stdout:
        lines.append(json.loads(line))
        if "ready" in lines[-1] and write is not None:
            with open("/dev/kmsg", "w") as kmsg:  # as root: into this kernel's log
                kmsg.write(f"<4>{write}\n")
            write = None
    assert reader.wait(timeout=30) == 0, reader.stderr.read()
    return lines, who


@needs_root_and_restriction
def test_the_units_grants_read_the_kernel_logs_xids(agent_venv):
    capabilities, _ = unit_grants()
    assert capabilities == ("syslog",)  # the unit's one capability, for this signal alone
    lines, who = _read_as_the_unit(agent_venv, capabilities, 4.0, NVRM)
    assert "uid 65534" in who and "CAP_SYSLOG" in who
    assert {"ready": "open_kmsg"} in lines, lines
    (xid,) = [line["xid"] for line in lines if "xid" in line]
    assert xid["xid"] == 48 and xid["pci_bus_id"] == "0000:0f:00" and xid["pid"] == 4242
    assert not [line for line in lines if "fault" in line]


@needs_root_and_restriction
def test_without_the_grant_the_kernel_log_is_named_unreadable_with_what_to_grant(agent_venv):
    lines, who = _read_as_the_unit(agent_venv, (), 1.0, None)
    assert "no capabilities" in who
    (fault,) = [line["fault"] for line in lines if "fault" in line]
    call, error, message = fault
    assert (call, error) == ("kernel_log", "Unreadable")
    assert "grant CAP_SYSLOG" in message and "systemd-journal" in message
    assert "Operation not permitted" in message  # /dev/kmsg under dmesg_restrict


# ---- MPS control and engine logs, as the unit's user ------------------------------------
#
# The unit grants these two by nothing of its own (no capability, no group beyond its own):
# the agent reads what the daemon's and the engines' owners leave readable to it. The kernel
# decides here: the pipe directory's and the log's modes, and whether another user's
# /proc/<pid>/environ may be read (a daemon's pipe directory is learnt from it). The control
# binary is the suite's stand-in (tests/inventory/agent/fake_mps), which, like the real one,
# reaches the daemon only through its pipe directory.

FAKE_CONTROL = Path(__file__).parents[1] / "inventory" / "agent" / "fake_mps"
OOM_LINE = (
    "(VllmWorker TP0 pid=4242) ERROR 06-05 06:18:13 [x.py:1] torch.OutOfMemoryError: CUDA out "
    "of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
    "1.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 5.00 GiB "
    "is reserved by PyTorch but unallocated."
)

SIGNALS_READER = """
import json, sys, time
from inventory.agent.mps import MpsMonitors
from inventory.agent.signals import HostSignals, SignalOptions
from inventory.telemetry.readings import PollResult
log_path, configured, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
mps = MpsMonitors([configured] if configured else [])
signals = HostSignals(SignalOptions(mps=mps))
entries = [{"deployment_id": "7", "engine": "vllm", "log_path": log_path}]
deadline, first = time.time() + seconds, True
while time.time() < deadline:
    mps.refresh()
    poll = PollResult("h", time.time(), 0.0, None, [], [])
    events, faults = signals.collect(poll, {}, entries, lambda pid: None)
    for fault in faults:
        print(json.dumps({"fault": [fault.call, fault.error, fault.message]}), flush=True)
    for event in events:
        print(json.dumps({"event": [event.kind, event.detail.get("deployment_id")]}), flush=True)
    if first:
        print(json.dumps({"ready": True}), flush=True)
        first = False
    time.sleep(0.2)
print(json.dumps({"live": mps.live}), flush=True)
"""


OTHER_UID = 4321  # a user of the node's that is not the pod's: an MPS daemon run as its own


def _mps_and_engine_log_as_the_unit(agent_venv, *, granted: bool, as_pod: bool = False):
    """The installed agent's signals as the unit's user (or, `as_pod`, as the DaemonSet's pod:
    uid 0 without capabilities), against an MPS control daemon's process (argv[0]
    nvidia-cuda-mps-control, its pipe directory in its environment) and an engine's log, both
    owned as `granted` says: by the agent's user and group, or by root only (as the pod: by
    root, as the kubelet and the device plugin's daemon; or by another user only).
    """
    work = Path(tempfile.mkdtemp(prefix="mps-engine-log-"))
    work.chmod(0o755)
    (work / "bin").mkdir(mode=0o755)
    control = work / "bin" / "nvidia-cuda-mps-control"
    control.write_text((FAKE_CONTROL / "nvidia-cuda-mps-control").read_text())
    control.chmod(0o755)
    pipe_dir = work / "mps-0"
    pipe_dir.mkdir()
    (pipe_dir / "daemon.json").write_text(json.dumps({"servers": {"900": [901]}}))
    log = work / "vllm.log"
    log.write_text("")
    if as_pod:
        # Granted: root's, 0700 / 0600 (the pod is uid 0: the owner). Else another user's.
        owner = 0 if granted else OTHER_UID
        for path in (pipe_dir, pipe_dir / "daemon.json", log):
            os.chown(path, owner, owner)
        pipe_dir.chmod(0o700)
        (pipe_dir / "daemon.json").chmod(0o600)
        log.chmod(0o600)
    else:
        owner = UNIT_UID if granted else 0
        # Granted: the daemon runs as a user of the agent's group, its folder that group's;
        # the engine's log is left world-readable (an ordinary umask 022). Else both are
        # root's alone.
        os.chown(pipe_dir, 0, UNIT_GID if granted else 0)
        os.chown(pipe_dir / "daemon.json", 0, UNIT_GID if granted else 0)
        pipe_dir.chmod(0o750 if granted else 0o700)
        (pipe_dir / "daemon.json").chmod(0o640 if granted else 0o600)
        log.chmod(0o644 if granted else 0o600)
    daemon = subprocess.Popen(
        ["/usr/bin/nvidia-cuda-mps-control", "30"],
        executable="sleep",
        env={"CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir), "PATH": "/usr/bin:/bin"},
        user=owner,
        group=owner,
        extra_groups=[],
    )
    try:
        if as_pod:
            command, env = [*AS_THE_POD, str(agent_venv / "bin" / "python")], {}
            who = "uid 0, no capabilities, no new privileges"
        else:
            command, env, who = unit_command(agent_venv, work)
        # Not granted, the pipe directory is listed in AGENT_MPS_PIPE_DIRS, as the
        # environment fault tells the operator to: the daemon's answer is then named.
        # As the pod, listed either way: a daemon's environment is closed to it (below).
        listed = "" if granted and not as_pod else str(pipe_dir)
        reader = subprocess.Popen(
            [*command, "-c", SIGNALS_READER, str(log), listed, "3"],
            cwd=work,
            env={"PATH": f"{work / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8", **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines = []
        for line in reader.stdout:
            lines.append(json.loads(line))
            if "ready" in lines[-1]:
                with log.open("a") as engine:  # the engine, as root, after the agent's first read
                    engine.write(OOM_LINE + "\n")
        assert reader.wait(timeout=30) == 0, reader.stderr.read()
    finally:
        daemon.kill()
        daemon.wait()
        shutil.rmtree(work, ignore_errors=True)
    faults = [line["fault"] for line in lines if "fault" in line]
    # Only this test's daemon and folder: others may run on the machine meanwhile.
    ours = [f for f in faults if f"pid {daemon.pid}" in f[2] or str(work) in f[2]]
    events = [line["event"] for line in lines if "event" in line]
    (live,) = [line["live"] for line in lines if "live" in line]
    return ours, events, [s for s in live if s["pipe_dir"] == str(pipe_dir)], who, pipe_dir, log


@needs_root_and_restriction
def test_the_units_user_finds_the_mps_daemon_and_reads_the_engine_log_it_is_let_read(agent_venv):
    faults, events, live, who, _, _ = _mps_and_engine_log_as_the_unit(agent_venv, granted=True)
    assert "uid 65534" in who
    assert faults == []
    # found through the daemon's own environment (nothing configured), and asked
    assert [(s["server_pid"], [c["pid"] for c in s["clients"]]) for s in live] == [(900, [901])]
    assert ["oom", "7"] in events


@needs_root_and_restriction
def test_what_the_units_user_may_not_read_is_named_the_mps_daemon_and_the_engine_log(agent_venv):
    faults, events, live, _, pipe_dir, log = _mps_and_engine_log_as_the_unit(
        agent_venv, granted=False
    )
    by_error = {(call, error): message for call, error, message in faults}
    assert set(by_error) == {
        ("mps_control", "EnvironUnreadable"),
        ("mps_control", "Unanswered"),
        ("engine_log", "PermissionError"),
    }, faults
    assert "AGENT_MPS_PIPE_DIRS" in by_error[("mps_control", "EnvironUnreadable")]
    assert by_error[("mps_control", "Unanswered")].startswith(f"{pipe_dir}: OSError: get_server")
    assert by_error[("engine_log", "PermissionError")].startswith(f"7 {log}: ")
    assert live == [] and ["oom", "7"] not in events


# ---- Xids from NVML's event set, as the unit's user -------------------------------------
#
# The unit grants this by nothing more than NVML's own device nodes: the installed agent's
# collector on NVIDIA's mock NVML (the real nvidia-ml-py ctypes path), as the unit's user with
# exactly its grants. Arriving: the mock's Xid 48 on card 1 comes through the event set.
# Missing: the mock cannot be told to refuse the registration, so the C entry point
# nvmlDeviceRegisterEvents is replaced, in the binding's table of function pointers, by one that
# returns what NVML answers a card without Xid events (NVML_ERROR_NOT_SUPPORTED, 3) or a caller
# it refuses (NVML_ERROR_NO_PERMISSION, 4); the binding's own return-code check turns that into
# its exception, and the fault is named for each card, once.

NVML_READER = """
import ctypes, json, sys, time
import pynvml
from inventory.telemetry.collector import NvmlCollector
refusals = json.loads(sys.argv[1])  # C entry point -> the NVML return code it answers
for name, code in refusals.items():
    pynvml._nvmlGetFunctionPointer_cache[name] = ctypes.CFUNCTYPE(ctypes.c_int)(
        lambda *args, code=code: code
    )
collector = NvmlCollector(pynvml, "mock-a100")
deadline = time.time() + float(sys.argv[2])
while time.time() < deadline:
    poll = collector.poll()
    for fault in poll.faults:
        print(json.dumps({"fault": [fault.card_index, fault.call, fault.error, fault.message]}))
    for event in poll.events:
        if event.kind == "xid":
            print(json.dumps({"xid": [event.card_index, event.detail["xid"]]}))
    print(json.dumps({"cards": len(poll.cards)}), flush=True)
    if not refusals and any(e.kind == "xid" for e in poll.events):
        break
    time.sleep(0.2)
collector.close()
"""


def _nvml_as_the_unit(
    agent_venv, refusals: dict[str, int], library_mode: int = 0o755, *, as_pod: bool = False
) -> tuple[list[dict], str]:
    from tests.mock_nvml import VENDORED, MockNvml

    if os.uname().machine != "x86_64":
        pytest.skip("the vendored mock NVML is built for x86_64 Linux")
    work = Path(tempfile.mkdtemp(prefix="event-set-"))
    work.chmod(0o755)
    try:
        (work / "nvml").mkdir(mode=0o755)
        # NVIDIA's example config: card 1 delivers Xid 48 after its first call.
        mock = MockNvml(work / "nvml", (VENDORED / "example-config.yaml").read_text())
        for path in (mock.folder, *mock.folder.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)
        (mock.folder / "lib").chmod(library_mode)
        if as_pod:
            command, env = [*AS_THE_POD, str(agent_venv / "bin" / "python")], {}
            who = "uid 0, no capabilities, no new privileges"
        else:
            command, env, who = unit_command(agent_venv, work)
        library_path = [mock.env["LD_LIBRARY_PATH"], env.get("LD_LIBRARY_PATH")]
        library_env = {"LD_LIBRARY_PATH": os.pathsep.join(p for p in library_path if p)}
        reader = subprocess.run(
            [*command, "-c", NVML_READER, json.dumps(refusals), "3"],
            cwd=work,
            env={"PATH": os.environ["PATH"], "LANG": "C.UTF-8", **env, **mock.env, **library_env},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert reader.returncode == 0, reader.stderr
        return [json.loads(line) for line in reader.stdout.splitlines()], who
    finally:
        shutil.rmtree(work, ignore_errors=True)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to the unit's user")


@needs_root
@pytest.mark.parametrize("as_pod", [False, True], ids=["unit", "pod"])
def test_the_event_sets_xid_arrives_as_the_unit_and_as_the_pod(agent_venv, as_pod):
    """As the unit's user and as the DaemonSet's pod (whose driver the NVIDIA runtime mounts:
    not emulated here, the mock has no device nodes)."""
    lines, who = _nvml_as_the_unit(agent_venv, {}, as_pod=as_pod)
    assert who.startswith("uid 0, no capabilities" if as_pod else "uid 65534")
    assert {"cards": 2} in lines
    assert [line["xid"] for line in lines if "xid" in line] == [[1, 48]]
    assert [line for line in lines if "fault" in line] == []


@needs_root
@pytest.mark.parametrize(
    ("code", "error"), [(3, "NVMLError_NotSupported"), (4, "NVMLError_NoPermission")]
)
def test_a_refused_event_set_is_named_for_each_card_as_the_units_user(agent_venv, code, error):
    lines, who = _nvml_as_the_unit(agent_venv, {"nvmlDeviceRegisterEvents": code})
    assert "uid 65534" in who
    faults = [line["fault"] for line in lines if "fault" in line]
    assert [(index, call, name) for index, call, name, _ in faults] == [
        (0, "nvmlDeviceRegisterEvents", error),
        (1, "nvmlDeviceRegisterEvents", error),
    ]  # once a card, at discovery, not every poll
    assert all("only the kernel log's arrive" in message for *_, message in faults)
    assert {"cards": 2} in lines  # the cards are still read
    # Not asserted: that no Xid comes. The mock queues its Xid on every event set, registered
    # or not; real NVML queues only a registered card's.


# NVML itself missing for the unit's user, named rather than silent: the library where the
# user cannot reach it (a folder 0700 root's: the kernel refuses it), and the driver's device
# nodes refused (nvmlInitWithFlags answering NVML_ERROR_NO_PERMISSION, 4, what NVML answers
# when /dev/nvidiactl cannot be opened; the mock has no device nodes to refuse).
@needs_root
@pytest.mark.parametrize(
    ("refusals", "library_mode", "error", "says"),
    [
        ({}, 0o700, "NVMLError_LibraryNotFound", "libnvidia-ml.so.1"),
        ({"nvmlInitWithFlags": 4}, 0o755, "NVMLError_NoPermission", "may not use NVML"),
    ],
    ids=["library-unreachable", "device-nodes-refused"],
)
def test_nvml_out_of_the_units_reach_is_named(agent_venv, refusals, library_mode, error, says):
    lines, who = _nvml_as_the_unit(agent_venv, refusals, library_mode)
    assert "uid 65534" in who
    faults = [line["fault"] for line in lines if "fault" in line]
    assert faults and {(index, call, name) for index, call, name, _ in faults} == {
        (None, "nvmlInit", error)
    }, lines
    assert all(says in message for *_, message in faults)
    assert {"cards": 0} in lines and {"cards": 2} not in lines


# ---- The kernel log as the DaemonSet's pod grants it ------------------------------------
#
# The agent's pod runs as uid 0 with every capability dropped, no privilege escalation, and
# reads the node's journal (hostPath /var/log/journal, read-only, AGENT_JOURNAL_DIR) with the
# journalctl of its image: /dev/kmsg is EPERM to it under dmesg_restrict (no CAP_SYSLOG). The
# node's journal is a real systemd-journald here, in a mount namespace of its own that puts its
# /run/log/journal on a folder of the test's, reading this kernel's /dev/kmsg; the pod's mount
# is a read-only bind of that folder, and the pod is setpriv: uid 0, no groups, no capability
# in any set, no new privileges.

JOURNALD = next(
    (p for p in ("/usr/lib/systemd/systemd-journald", "/lib/systemd/systemd-journald")
     if os.path.exists(p)), None,
)  # fmt: skip
needs_journald = pytest.mark.skipif(
    JOURNALD is None or shutil.which("journalctl") is None,
    reason="needs systemd-journald and journalctl (the node's journal and the image's reader)",
)
AS_THE_POD = ["setpriv", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
              "--no-new-privs", "--"]  # fmt: skip


def _journald(folder: Path) -> subprocess.Popen:
    script = (
        "mount -t tmpfs tmpfs /run/systemd && mount -t tmpfs tmpfs /run/log && "
        f'mkdir /run/log/journal && mount --bind "{folder}" /run/log/journal && exec "$0"'
    )
    journald = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, JOURNALD],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not list(folder.glob("*/system.journal")):
        assert journald.poll() is None and time.monotonic() < deadline, "journald did not start"
        time.sleep(0.1)
    return journald


def _read_as_the_pod(agent_venv, journal: Path | None, seconds: float, write: str | None):
    work = Path(tempfile.mkdtemp(prefix="kernel-log-pod-"))
    work.chmod(0o755)
    node = work / "node-journal"  # where the pod mounts the node's journal
    node.mkdir()
    mount = (
        f'mount --bind "{journal}" "{node}" && mount -o remount,bind,ro "{node}" && '
        if journal is not None
        else ""
    )
    python = agent_venv / "bin" / "python"
    argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
            f'{mount}exec "$@"', "sh", *AS_THE_POD, python, "-c", READER, str(seconds)]  # fmt: skip
    try:
        reader = subprocess.Popen(
            argv,
            cwd=work,
            env={"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "AGENT_JOURNAL_DIR": str(node)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines = []
        for line in reader.stdout:
            lines.append(json.loads(line))
            if "ready" in lines[-1] and write is not None:
                time.sleep(0.5)  # journalctl -f is following once it printed nothing back
                with open("/dev/kmsg", "w") as kmsg:  # as root: into this kernel's log
                    kmsg.write(f"<4>{write}\n")
                write = None
        assert reader.wait(timeout=30) == 0, reader.stderr.read()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return lines


@needs_root_and_restriction
@needs_journald
def test_the_daemonsets_pod_reads_the_kernel_logs_xids_from_the_nodes_journal(agent_venv):
    journal = Path(tempfile.mkdtemp(prefix="node-journal-"))
    journald = _journald(journal)
    try:
        marked = NVRM.replace("DBE", f"pod-{os.getpid()} DBE")
        # Written from user space, a /dev/kmsg line has the LOG_USER facility, and journald
        # takes a leading "NVRM:" for its syslog identifier; the driver's own lines (LOG_KERN)
        # are filed under the identifier "kernel" with the message whole. "kernel: " first
        # makes the record what the driver's would be, checked below.
        lines = _read_as_the_pod(agent_venv, journal, 5.0, f"kernel: {marked}")
        records = subprocess.run(
            ["journalctl", "-k", "--directory", journal, "-o", "json", "--no-pager"],
            capture_output=True, text=True, check=True,
        ).stdout.splitlines()  # fmt: skip
        (record,) = [r for r in map(json.loads, records) if f"pod-{os.getpid()}" in r["MESSAGE"]]
        assert (record["SYSLOG_IDENTIFIER"], record["MESSAGE"]) == ("kernel", marked)
    finally:
        journald.terminate()
        journald.wait(10)
        shutil.rmtree(journal, ignore_errors=True)
    assert {"ready": "open_journal"} in lines, lines  # /dev/kmsg was refused: no CAP_SYSLOG
    xids = [line["xid"] for line in lines if "xid" in line]
    ours = [x for x in xids if f"pod-{os.getpid()}" in x.get("message", "")]
    assert len(ours) == 1, lines
    assert ours[0]["xid"] == 48 and ours[0]["pci_bus_id"] == "0000:0f:00"
    assert ours[0]["pid"] == 4242
    assert not [line for line in lines if "fault" in line]


@needs_root_and_restriction
@needs_journald
def test_the_daemonsets_pod_without_the_nodes_journal_names_the_kernel_log_missing(agent_venv):
    lines = _read_as_the_pod(agent_venv, None, 1.5, None)  # the folder mounted but empty
    faults = [line["fault"] for line in lines if "fault" in line]
    assert faults, lines
    assert {(call, error) for call, error, _ in faults} == {("kernel_log", "OSError")}
    assert all("journalctl exited with status 1" in message for *_, message in faults)
    assert not [line for line in lines if "xid" in line]


# As the DaemonSet's pod (uid 0, every capability dropped, hostPID): a root-owned pipe
# directory and log are its own, but a daemon's /proc/<pid>/environ is not, even root's: the
# kernel's ptrace check (commoncap) wants the reader's capabilities to cover the daemon's,
# and the pod has none. Its pipe directories are listed (AGENT_MPS_PIPE_DIRS, in the ConfigMap;
# /tmp/nvidia-mps when unset), and each daemon found is named EnvironUnreadable once.
@needs_root_and_restriction
def test_the_daemonsets_pod_asks_a_listed_mps_daemon_and_reads_a_root_engine_log(agent_venv):
    faults, events, live, who, _, _ = _mps_and_engine_log_as_the_unit(
        agent_venv, granted=True, as_pod=True
    )
    assert who.startswith("uid 0, no capabilities")
    assert [(s["server_pid"], [c["pid"] for c in s["clients"]]) for s in live] == [(900, [901])]
    assert ["oom", "7"] in events
    ((call, error, message),) = faults
    assert (call, error) == ("mps_control", "EnvironUnreadable")
    assert "AGENT_MPS_PIPE_DIRS" in message and "DaemonSet's pod" in message


@needs_root_and_restriction
def test_what_the_daemonsets_pod_may_not_read_is_named(agent_venv):
    faults, events, live, _, pipe_dir, log = _mps_and_engine_log_as_the_unit(
        agent_venv, granted=False, as_pod=True
    )
    by_error = {(call, error): message for call, error, message in faults}
    assert set(by_error) == {
        ("mps_control", "EnvironUnreadable"),
        ("mps_control", "Unanswered"),
        ("engine_log", "PermissionError"),
    }, faults
    assert by_error[("mps_control", "Unanswered")].startswith(f"{pipe_dir}: OSError: get_server")
    assert by_error[("engine_log", "PermissionError")].startswith(f"7 {log}: ")
    assert live == [] and ["oom", "7"] not in events


# As the DaemonSet's pod, with AGENT_MPS_PIPE_GLOB: the node's parent folder of the daemons'
# pipe directories (the runbooks' /run/nvidia-mps/gpuN) bind-mounted read-only into a mount
# namespace of its own, the daemons (root's: their environment closed to the pod) in a PID
# namespace of their own with the pod, so that no other daemon on this machine is counted.
# Each directory holding a `control` socket is found and asked without any environment read;
# a daemon more than the directories found is named.

GLOB_READER = """
import json, os, sys, time
from inventory.agent.mps import MpsMonitors
from inventory.telemetry.readings import PollResult
mps = MpsMonitors([], globs=[sys.argv[1]])
mps.refresh()
events, faults = mps.poll(time.time(), PollResult("h", time.time(), 0.0, None, [], []), {})
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")][0]
print(json.dumps({"uid": os.getuid(), "caps": caps, "live": mps.live,
                  "faults": [[f.call, f.error, f.message] for f in faults]}))
"""
GLOB_POD = """
set -e
mkdir -p "$MOUNTED" && mount --bind "$NODE_FOLDER" "$MOUNTED"
mount -o remount,bind,ro "$MOUNTED"
for dir in $DAEMON_DIRS; do
  CUDA_MPS_PIPE_DIRECTORY="$dir" bash -c 'exec -a /usr/bin/nvidia-cuda-mps-control sleep 60' &
done
sleep 0.2
exec "$@"
"""


def _globbed_daemons_as_the_pod(agent_venv, *, elsewhere: bool) -> dict:
    work = Path(tempfile.mkdtemp(prefix="mps-glob-"))  # short: a socket's path is at most 107
    try:
        work.chmod(0o755)
        (work / "bin").mkdir(mode=0o755)
        control = work / "bin" / "nvidia-cuda-mps-control"
        control.write_text((FAKE_CONTROL / "nvidia-cuda-mps-control").read_text())
        control.chmod(0o755)
        node_folder, mounted = work / "node" / "nvidia-mps", work / "pod" / "nvidia-mps"
        daemons, sockets = [], []
        for index, server in ((0, 900), (1, 910)):
            pipe_dir = node_folder / f"gpu{index}"
            pipe_dir.mkdir(parents=True)
            listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listening.bind(str(pipe_dir / "control"))
            sockets.append(listening)
            (pipe_dir / "daemon.json").write_text(
                json.dumps({"servers": {str(server): [server + 1]}})
            )
            (pipe_dir / "daemon.json").chmod(0o600)
            pipe_dir.chmod(0o700)  # root's, as a root daemon makes it: the pod is uid 0
            daemons.append(str(mounted / f"gpu{index}"))
        (node_folder / "not-a-daemon").mkdir()
        if elsewhere:
            daemons.append(str(work / "tmp-nvidia-mps-2"))  # outside the glob
        ran = subprocess.run(
            ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "bash", "-c", GLOB_POD,
             "pod", *AS_THE_POD, str(agent_venv / "bin" / "python"), "-c", GLOB_READER,
             f"{mounted}/*"],
            env={"PATH": f"{work / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8",
                 "NODE_FOLDER": str(node_folder), "MOUNTED": str(mounted),
                 "DAEMON_DIRS": " ".join(daemons)},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        for listening in sockets:
            listening.close()
        assert ran.returncode == 0, ran.stderr
        return {**json.loads(ran.stdout.splitlines()[-1]), "mounted": mounted}
    finally:
        shutil.rmtree(work, ignore_errors=True)


needs_root_and_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None,
    reason="needs root, unshare and setpriv (mount and PID namespaces, the pod's uid 0)",
)


@needs_root_and_namespaces
def test_the_daemonsets_pod_finds_every_mps_daemon_by_the_glob_on_a_read_only_mount(agent_venv):
    found = _globbed_daemons_as_the_pod(agent_venv, elsewhere=False)
    assert (found["uid"], int(found["caps"], 16)) == (0, 0), "uid 0, no capability"
    mounted = found["mounted"]
    assert sorted((s["pipe_dir"], s["server_pid"], [c["pid"] for c in s["clients"]])
                  for s in found["live"]) == [
        (str(mounted / "gpu0"), 900, [901]), (str(mounted / "gpu1"), 910, [911])]  # fmt: skip
    assert found["faults"] == [], "no daemon left unnamed, none named needlessly"


@needs_root_and_namespaces
def test_a_daemon_outside_the_glob_is_named_to_the_daemonsets_pod(agent_venv):
    found = _globbed_daemons_as_the_pod(agent_venv, elsewhere=True)
    assert len(found["live"]) == 2
    faults = found["faults"]
    assert {(call, error) for call, error, _ in faults} == {("mps_control", "EnvironUnreadable")}
    assert len(faults) == 3, "three daemons, two directories: which is unseen cannot be told"
    assert all("AGENT_MPS_PIPE_GLOB" in message for *_, message in faults)


# ---- The allocator exporter's folder, as the unit's user and as the DaemonSet's pod ----
#
# An engine, as root, in its own PID and network namespaces (unshare: the agent can reach
# neither its PID nor its 127.0.0.1), writes its snapshot into the host folder; the installed
# agent's reader, as the unit's user (uid 65534, the unit's grants) and as the pod (uid 0, no
# capability), finds it by the engine's host PID (its NSpid and start time, read in /proc as
# that user). Missing: the folder closed to that user (0700, another owner's) is named.

STUB_TORCH = Path(__file__).parents[1] / "inventory" / "agent" / "stub_torch"
CHECKOUT = Path(__file__).resolve().parents[2]
GIB = 2**30
ALLOCATOR_READER = """
import json, sys
from pathlib import Path
from inventory.agent.allocator_scrape import read_snapshots
figures, problems = read_snapshots(Path(sys.argv[1]), {int(sys.argv[2])})
print(json.dumps({"figures": {str(k): v for k, v in figures.items()}, "problems": problems}))
"""


def _namespaced_engine(folder: Path) -> tuple[subprocess.Popen, int]:
    stats = folder.parent / "stats.json"
    stats.write_text(json.dumps({"0": {"reserved_bytes.all.current": 40 * GIB,
                                       "allocated_bytes.all.current": 31 * GIB}}))  # fmt: skip
    env = {**os.environ, "STUB_TORCH_STATS": str(stats), "ALLOCATOR_EXPORTER_DIR": str(folder),
           "ALLOCATOR_EXPORTER_INTERVAL_S": "0.2", "ALLOCATOR_EXPORTER_PORT": "0",
           "PYTHONPATH": os.pathsep.join([str(STUB_TORCH), str(CHECKOUT)])}  # fmt: skip
    code = (
        "import sys, inventory.agent.allocator_exporter as e; "
        "e.vllm_plugin(); print(e.start(), flush=True); sys.stdin.read()"
    )
    engine = subprocess.Popen(
        ["unshare", "--pid", "--net", "--fork", "--mount-proc", "sh", "-c",
         'ip link set lo up && exec "$0" -c "$1"', sys.executable, code],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    engine.stdout.readline()  # serving, its first snapshot written
    (host_pid,) = map(
        int, Path(f"/proc/{engine.pid}/task/{engine.pid}/children").read_text().split()
    )
    deadline = time.monotonic() + 10
    while not list(folder.glob("1-*.json")):
        assert time.monotonic() < deadline, "no snapshot"
        time.sleep(0.05)
    return engine, host_pid


def _snapshots_as(agent_venv, who: str, *, closed: bool) -> tuple[dict | None, list, str, Path]:
    if shutil.which("ip") is None:
        pytest.skip("ip is not installed")
    work = Path(tempfile.mkdtemp(prefix="allocator-"))
    work.chmod(0o755)
    folder = work / "allocator"
    folder.mkdir()
    folder.chmod(0o1777)  # as docs/deploy.md's tmpfiles line makes it
    engine, host_pid = _namespaced_engine(folder)
    try:
        if closed:  # another user's folder, closed to the agent's
            os.chown(folder, OTHER_UID, OTHER_UID)
            folder.chmod(0o700)
        if who == "pod":
            command, env = [*AS_THE_POD, str(agent_venv / "bin" / "python")], {}
            said = "uid 0, no capabilities, no new privileges"
        else:
            command, env, said = unit_command(agent_venv, work)
        read = subprocess.run(
            [*command, "-c", ALLOCATOR_READER, str(folder), str(host_pid)],
            cwd=work,
            env={"PATH": os.environ["PATH"], "LANG": "C.UTF-8", **env},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert read.returncode == 0, read.stderr
        answer = json.loads(read.stdout)
    finally:
        engine.stdin.close()
        engine.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    assert host_pid != 1  # the engine's own PID inside was 1
    return answer["figures"].get(str(host_pid)), answer["problems"], said, folder


@needs_root
@pytest.mark.parametrize("who", ["unit", "pod"])
def test_an_engine_in_its_namespaces_is_read_from_the_folder_by_the_agents_user(agent_venv, who):
    figures, problems, said, _ = _snapshots_as(agent_venv, who, closed=False)
    assert said.startswith("uid 65534" if who == "unit" else "uid 0, no capabilities")
    assert problems == []
    assert figures["reserved_bytes"] == 40 * GIB and figures["allocated_bytes"] == 31 * GIB


@needs_root
@pytest.mark.parametrize("who", ["unit", "pod"])
def test_a_folder_closed_to_the_agents_user_is_named(agent_venv, who):
    figures, problems, _, folder = _snapshots_as(agent_venv, who, closed=True)
    assert figures is None
    assert problems == [f"{folder}: PermissionError: [Errno 13] Permission denied: '{folder}'"]
