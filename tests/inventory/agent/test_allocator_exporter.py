"""The allocator exporter inside a serving process, and the agent reading it.

Torch is not installed here: the serving processes import a stub of `torch.cuda`'s allocator
calls (tests/inventory/agent/stub_torch), only where torch is absent. The exporter's own code is the
code a real engine runs."""

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from inventory.agent import allocator_scrape
from inventory.agent.allocator_exporter import identity, prometheus_text
from inventory.telemetry.engines import EngineScrapeError, http_fetch
from tests.processes import free_port, wait_for

STUB = Path(__file__).with_name("stub_torch")
CHECKOUT = Path(__file__).resolve().parents[3]
GIB = 2**30
STATS = {
    "0": {
        "reserved_bytes.all.current": 40 * GIB,
        "reserved_bytes.all.peak": 44 * GIB,
        "allocated_bytes.all.current": 31 * GIB,
        "allocated_bytes.all.peak": 39 * GIB,
        "active_bytes.all.current": 31 * GIB,
        "inactive_split_bytes.all.current": 2 * GIB,
        "num_ooms": 1,
        "num_alloc_retries": 3,
    },
    "segments": [
        {"device": 0, "blocks": [{"state": "inactive", "size": 512 * 2**20},
                                 {"state": "active_allocated", "size": GIB},
                                 {"state": "inactive", "size": 3 * 2**20}]},
    ],
}  # fmt: skip


def _serving_process(tmp_path, port, stats):
    path = tmp_path / f"stats-{len(list(tmp_path.glob('stats-*')))}.json"
    path.write_text(json.dumps(stats))
    env = {**os.environ, "STUB_TORCH_STATS": str(path), "ALLOCATOR_EXPORTER_SEGMENTS": "1"}
    if importlib.util.find_spec("torch") is None:
        env["PYTHONPATH"] = os.pathsep.join([str(STUB), env.get("PYTHONPATH", "")])
    code = (
        "import sys, time, inventory.agent.allocator_exporter as e; "
        f"print(e.start({port}), flush=True); time.sleep(60)"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[3],
    )  # fmt: skip
    return process, int(process.stdout.readline())


@pytest.fixture
def engines(tmp_path):
    processes = []

    def start(port, stats):
        process, bound = _serving_process(tmp_path, port, stats)
        processes.append(process)
        return process.pid, bound

    yield start
    for process in processes:
        process.kill()
        process.wait()


def _hang_up(server: socket.socket) -> None:
    with server:
        while True:
            conn, _ = server.accept()
            conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
            conn.close()


def _free_port_with_the_next_held() -> tuple[int, socket.socket]:
    """A free port whose successor this test holds (another program may hold a free port's
    successor already: then try another)."""
    for _ in range(50):
        base = free_port()
        try:
            return base, socket.create_server(("127.0.0.1", base + 1))
        except OSError:
            continue
    raise AssertionError("no free port with a free successor in 50 tries")


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="stub only without torch")
def test_the_agent_reads_each_serving_process_from_the_first_port_on(engines):
    # The port after the first is held by another program, which speaks no HTTP.
    base, other = _free_port_with_the_next_held()
    threading.Thread(target=_hang_up, args=(other,), daemon=True).start()
    first_pid, first_port = engines(base, STATS)
    second = json.loads(json.dumps(STATS))
    second["0"]["reserved_bytes.all.current"] = 10 * GIB
    second_pid, second_port = engines(base, second)  # the next free port
    assert first_port == base and second_port > base + 1
    deadline = time.monotonic() + 10
    while True:
        try:
            figures = allocator_scrape.read(http_fetch, f"http://127.0.0.1:{base}/metrics")
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert figures[first_pid] == {
        "reserved_bytes": 40 * GIB,
        "allocated_bytes": 31 * GIB,
        "inactive_split_bytes": 2 * GIB,
        "largest_free_block_bytes": 512 * 2**20,
    }
    assert figures[second_pid]["reserved_bytes"] == 10 * GIB
    as_json = allocator_scrape.read(http_fetch, f"http://127.0.0.1:{base}/memory_stats")
    assert as_json == figures


def test_prometheus_text_has_one_series_per_figure_and_device():
    rows = [{"pid": 7, "device": 1, "memory_stats": STATS["0"], "largest_free_block_bytes": 5}]
    text = prometheus_text(rows)
    assert f'torch_cuda_allocator_reserved_bytes{{pid="7",device="1"}} {40 * GIB}' in text
    assert "# TYPE torch_cuda_allocator_ooms counter" in text
    assert 'torch_cuda_allocator_largest_free_block_bytes{pid="7",device="1"} 5' in text
    assert allocator_scrape.parse(text)[7]["allocated_bytes"] == 31 * GIB


def test_a_process_on_two_devices_sums_its_pools_and_keeps_its_largest_block():
    rows = [
        {"pid": 7, "device": d, "memory_stats": STATS["0"], "largest_free_block_bytes": size}
        for d, size in ((0, 5), (1, 9))
    ]
    (figures,) = allocator_scrape.parse(prometheus_text(rows)).values()
    assert figures["reserved_bytes"] == 80 * GIB and figures["largest_free_block_bytes"] == 9


# ---- engines in containers: the snapshot folder ------------------------------------------


def _snapshot(folder: Path, pid: int, started: int, reserved: int) -> Path:
    row = {"pid": pid, "device": 0, "largest_free_block_bytes": None,
           "memory_stats": {**STATS["0"], "reserved_bytes.all.current": reserved}}  # fmt: skip
    path = folder / f"{pid}-{started}.json"
    path.write_text(json.dumps({"ns_pid": pid, "starttime": started, "rows": [row]}))
    return path


def _proc_entry(proc: Path, host_pid: int, nspids: str, started: int) -> None:
    (proc / str(host_pid)).mkdir(parents=True)
    (proc / str(host_pid) / "status").write_text(f"Name:\tpython3\nNSpid:\t{nspids}\n")
    # a command name with a space and a ")" of its own: the fields count from its last ")"
    fields = " ".join(["S", *["0"] * 18, str(started), "0"])
    (proc / str(host_pid) / "stat").write_text(f"{host_pid} (vllm (wor) ker)) {fields}\n")


def test_a_snapshot_is_keyed_by_the_host_pid_of_its_namespaces_pid_and_start_time(tmp_path):
    proc, folder = tmp_path / "proc", tmp_path / "allocator"
    folder.mkdir()
    _proc_entry(proc, 4242, "4242 7", 9000)  # PID 7 in its container
    _proc_entry(proc, 4243, "4243 1", 9100)
    _snapshot(folder, 7, 9000, 40 * GIB)
    _snapshot(folder, 1, 9999, 10 * GIB)  # a PID 1 of another start: not 4243's
    _snapshot(folder, 8, 9000, 10 * GIB)  # left by an engine gone since
    figures, problems = allocator_scrape.read_snapshots(folder, {4242, 4243, 5000}, proc=proc)
    assert figures == {4242: {"reserved_bytes": 40 * GIB, "allocated_bytes": 31 * GIB,
                              "inactive_split_bytes": 2 * GIB}}  # fmt: skip
    assert problems == []


def test_a_live_processes_stale_garbled_or_linked_snapshot_is_a_problem_not_figures(tmp_path):
    proc, folder = tmp_path / "proc", tmp_path / "allocator"
    folder.mkdir()
    for pid in (11, 12, 13):
        _proc_entry(proc, 4000 + pid, f"{4000 + pid} {pid}", 500)
    stale = _snapshot(folder, 11, 500, GIB)
    os.utime(stale, (time.time() - 120, time.time() - 120))
    (folder / "12-500.json").write_text('{"ns_pid": 12, "rows": [')
    secret = tmp_path / "agent.secret"
    secret.write_text('{"rows": []}')
    (folder / "13-500.json").symlink_to(secret)  # the engines write here, not the agent
    figures, problems = allocator_scrape.read_snapshots(folder, {4011, 4012, 4013}, proc=proc)
    assert figures == {}
    stale, garbled, linked = sorted(problems)
    assert stale.startswith("11-500.json (host pid 4011): not rewritten for 12")
    assert garbled.startswith("12-500.json (host pid 4012): JSONDecodeError")
    assert linked.startswith("13-500.json (host pid 4013): OSError")
    assert allocator_scrape.read_snapshots(tmp_path / "absent", {4011}, proc=proc) == ({}, [])


def _namespaces_missing() -> str | None:
    if os.geteuid() != 0:
        return "PID and network namespaces need root"
    for program in ("unshare", "nsenter", "ip"):
        if shutil.which(program) is None:
            return f"{program} is not installed"
    probe = subprocess.run(
        ["unshare", "--pid", "--net", "--fork", "--mount-proc", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode:
        return f"unshare cannot make PID and network namespaces: {probe.stderr.strip()}"
    return None


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="stub only without torch")
def test_an_engine_in_its_own_pid_and_network_namespaces_reaches_the_agent_by_the_folder(
    tmp_path,
):
    if missing := _namespaces_missing():
        pytest.skip(missing)
    folder, stats = tmp_path / "allocator", tmp_path / "stats.json"
    folder.mkdir()
    stats.write_text(json.dumps(STATS))
    port = free_port()
    env = {**os.environ, "STUB_TORCH_STATS": str(stats), "ALLOCATOR_EXPORTER_DIR": str(folder),
           "ALLOCATOR_EXPORTER_INTERVAL_S": "0.2", "ALLOCATOR_EXPORTER_PORT": str(port),
           "ALLOCATOR_EXPORTER_SEGMENTS": "1",
           "PYTHONPATH": os.pathsep.join([str(STUB), str(CHECKOUT)])}  # fmt: skip
    # What vLLM does in each process; then it serves until the test closes its stdin.
    code = (
        "import sys, inventory.agent.allocator_exporter as e; "
        "e.vllm_plugin(); print(e.start(), flush=True); sys.stdin.read()"
    )
    engine = subprocess.Popen(
        ["unshare", "--pid", "--net", "--fork", "--mount-proc", "sh", "-c",
         'ip link set lo up && exec "$0" -c "$1"', sys.executable, code],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert int(engine.stdout.readline()) == port  # bound inside: its own 127.0.0.1
        # unshare forks the namespace's PID 1, which became the exporter's Python
        (host_pid,) = map(
            int, Path(f"/proc/{engine.pid}/task/{engine.pid}/children").read_text().split()
        )
        # Named by its own PID, 1, and the start time the host reads too.
        ((ns_pid, started),) = allocator_scrape.host_processes({host_pid})
        assert ns_pid == 1 != host_pid
        assert [path.name for path in folder.iterdir()] == [f"1-{started}.json"]
        figures, problems = allocator_scrape.read_snapshots(folder, {host_pid, os.getpid()})
        assert problems == []
        assert figures == {host_pid: {"reserved_bytes": 40 * GIB, "allocated_bytes": 31 * GIB,
                                      "inactive_split_bytes": 2 * GIB,
                                      "largest_free_block_bytes": 512 * 2**20}}  # fmt: skip
        # The port answers in the engine's network namespace, and not from the host's.
        inside = subprocess.run(
            ["nsenter", "--target", str(host_pid), "--net", sys.executable, "-c",
             f"import urllib.request; print(urllib.request.urlopen("
             f"'http://127.0.0.1:{port}/memory_stats', timeout=5).read().decode())"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert json.loads(inside.stdout)[0]["pid"] == 1, inside.stderr
        with pytest.raises(EngineScrapeError):
            http_fetch(f"http://127.0.0.1:{port}/memory_stats", 2.0)
        # The file follows the allocator: rewritten every interval.
        changed = json.loads(json.dumps(STATS))
        changed["0"]["reserved_bytes.all.current"] = 10 * GIB
        stats.write_text(json.dumps(changed))
        wait_for(
            lambda: (
                allocator_scrape.read_snapshots(folder, {host_pid})[0][host_pid]["reserved_bytes"]
                == 10 * GIB
            ),
            10,
            "the rewritten snapshot",
        )
        engine.stdin.close()  # a clean exit takes its file away
        assert engine.wait(timeout=30) == 0
        assert list(folder.iterdir()) == []
    finally:
        engine.kill()
        engine.wait()


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="stub only without torch")
def test_a_forked_worker_keeps_a_snapshot_of_its_own_and_its_exit_removes_only_that(tmp_path):
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps(STATS))
    folder = tmp_path / "allocator"
    folder.mkdir()
    # vLLM forks its workers after the plugin loaded in the parent; each loads it again.
    code = (
        "import os, sys, json, inventory.agent.allocator_exporter as e\n"
        "e.publish()\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    e.publish()\n"
        "    print(json.dumps(sorted(os.listdir(sys.argv[1]))), flush=True)\n"
        "    sys.exit(0)\n"
        "os.waitpid(child, 0)\n"
        "print(json.dumps([os.getpid(), child, sorted(os.listdir(sys.argv[1]))]), flush=True)\n"
    )
    env = {**os.environ, "STUB_TORCH_STATS": str(stats), "ALLOCATOR_EXPORTER_DIR": str(folder),
           "PYTHONPATH": os.pathsep.join([str(STUB), str(CHECKOUT)])}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", code, folder], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    in_child, after_child = map(json.loads, result.stdout.splitlines())
    parent, child, left = after_child
    assert sorted(name.split("-")[0] for name in in_child) == sorted([str(parent), str(child)])
    assert [name.split("-")[0] for name in left] == [str(parent)]
    assert list(folder.iterdir()) == []  # and the parent's exit took its own


def test_the_exporter_names_itself_as_the_agent_finds_it_in_the_hosts_proc():
    assert allocator_scrape.host_processes({os.getpid()}) == {identity(): os.getpid()}


# ---- a containerised engine that leaves no figures is named --------------------------------


def _missing(watch, now, pids, have=(), engine="vllm", contained=True, **entry):
    entries = [{"deployment_id": "7", "engine": engine, "runtime_name": "vllm-llama", **entry}]
    deployments = {(0, pid): "7" for pid in pids}
    return watch.check(now, entries, deployments, set(have), lambda pid: contained)


def test_a_deployment_without_figures_is_named_once_and_again_only_after_figures_came_and_went(
    tmp_path,
):
    watch = allocator_scrape.MissingFigures(tmp_path, after_s=60)
    assert _missing(watch, 0, [41]) == []
    assert _missing(watch, 59, [41]) == [], "the plugin's minute"
    (fault,) = _missing(watch, 60, [41])
    assert (fault.call, fault.error) == ("scrape:allocator", "NotPublished")
    assert "not there either" not in fault.message, "the agent's folder is there"
    assert _missing(watch, 120, [41]) == [], "once"
    assert _missing(watch, 500, [42]) == [], "restarted without the plugin: still said"
    assert _missing(watch, 505, [42], have=[42]) == [], "the plugin came"
    assert _missing(watch, 510, [43]) == [], "a new process: its own minute again"
    assert len(_missing(watch, 570, [43])) == 1, "figures came and went: said again"


@pytest.mark.parametrize(
    "case",
    [{"engine": "ollama"}, {"engine": "sglang"}, {"contained": False},
     {"allocator_url": "http://127.0.0.1:9464/memory_stats"}],
)  # fmt: skip
def test_what_never_publishes_to_the_folder_is_not_named(tmp_path, case):
    watch = allocator_scrape.MissingFigures(tmp_path, after_s=60)
    assert _missing(watch, 0, [41], **case) == []
    assert _missing(watch, 600, [41], **case) == []


def test_an_engine_the_operator_names_is_watched_and_a_missing_agent_folder_is_said(tmp_path):
    watch = allocator_scrape.MissingFigures(tmp_path / "absent", ("vllm", "sglang"), after_s=60)
    _missing(watch, 0, [41], engine="sglang")
    (fault,) = _missing(watch, 60, [41], engine="sglang")
    assert f"the agent's own {tmp_path / 'absent'} is not there either" in fault.message
