"""The allocator exporter inside a serving process, and the agent reading it.

Torch is not installed here: the serving processes import a stub of `torch.cuda`'s allocator
calls (tests/inventory/agent/stub_torch), only where torch is absent. The exporter's own code is the
code a real engine runs."""

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from inventory.agent import allocator_scrape
from inventory.agent.allocator_exporter import prometheus_text
from inventory.telemetry.engines import http_fetch
from tests.processes import free_port

STUB = Path(__file__).with_name("stub_torch")
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


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="stub only without torch")
def test_the_agent_reads_each_serving_process_from_the_first_port_on(engines):
    base = free_port()
    # The port after the first is held by another program, which speaks no HTTP.
    other = socket.create_server(("127.0.0.1", base + 1))
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


def test_the_vllm_plugin_entry_point_names_the_exporter():
    text = (Path(__file__).resolve().parents[3] / "pyproject.toml").read_text()
    assert '[project.entry-points."vllm.general_plugins"]' in text
    assert 'allocator_exporter = "inventory.agent.allocator_exporter:vllm_plugin"' in text
