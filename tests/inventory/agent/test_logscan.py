"""logscan on real log lines from the issue threads of PyTorch, vLLM, SGLang, TGI, Ollama,
llama.cpp and the NVIDIA kernel module (tests/fixtures/engine-logs/, sources in each header).

Every fixture line is either where one of the events below starts or no event at all: the
expected list is the whole answer for its file.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from inventory.agent.logscan import LogScanner, read_figures, scan_lines, split_prefix

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "engine-logs"
KIB, MIB, GIB = 2**10, 2**20, 2**30


def gib(value: float) -> int:
    return int(value * GIB)


def mib(value: float) -> int:
    return int(value * MIB)


# file -> [(line, kind, engine, figures and fields that must be there)]
EXPECTED = {
    "pytorch.log": [
        (
            5,
            "oom",
            "pytorch",
            {
                "requested_bytes": gib(1.69),
                "capacity_bytes": gib(14.56),
                "allocated_bytes": mib(649.97),
                "free_bytes": gib(1.31),
                "reserved_bytes": gib(1.01),
                "gpu_index": 0,
            },
        ),
        (
            7,
            "oom",
            "pytorch",
            {
                "requested_bytes": gib(1.70),
                "capacity_bytes": gib(6.00),
                "free_bytes": 0,
                "allocated_bytes": gib(2.93),
                "reserved_bytes": gib(2.93) + gib(2.30),
            },
        ),
        (
            8,
            "oom",
            "pytorch",
            {
                "requested_bytes": gib(22.78),
                "process_used_bytes": gib(18.73),
                "reserved_bytes": gib(9.08) + gib(9.35),
            },
        ),
        (12, "oom", "pytorch", {"requested_bytes": gib(2.26), "reserved_bytes": gib(1.24)}),
        (14, "oom", "pytorch", {"requested_bytes": mib(128), "free_bytes": mib(24.81)}),
        (16, "oom", "pytorch", {"requested_bytes": gib(55.57), "allocated_bytes": mib(984.52)}),
        (19, "oom", "pytorch", {"reason": "cublas_alloc_failed", "end_line": 22}),
        (23, "fault", "pytorch", {"reason": "device_side_assert"}),
        (26, "fault", "pytorch", {"reason": "device_side_assert"}),
    ],
    "vllm.log": [
        (5, "engine_died", "vllm", {"reason": "engine_dead"}),
        (8, "oom", "vllm", {"reason": "kv_cache_no_room", "phase": "load"}),
        (
            18,
            "oom",
            "vllm",
            {
                "reason": "free_memory_below_target",
                "free_bytes": gib(31.44),
                "capacity_bytes": gib(47.38),
                "requested_bytes": gib(45.01),
                "gpu_memory_utilization": 0.95,
            },
        ),
        (19, "engine_died", "vllm", {"reason": "engine_core_failed_to_start"}),
        (26, "oom", "vllm", {"free_bytes": gib(7.34), "capacity_bytes": gib(139.72)}),
        (33, "oom", "vllm", {"reason": "cuda_oom", "phase": "cuda_graph_capture"}),
        (
            40,
            "oom",
            "vllm",
            {
                "phase": "cuda_graph_capture",
                "gpu_index": 6,
                "requested_bytes": mib(2),
                "free_bytes": 448 * KIB,
            },
        ),
        (
            43,
            "oom",
            "vllm",
            {"reason": "kv_cache_too_small", "max_model_len": 29000, "kv_cache_tokens": 23648},
        ),
        (44, "engine_died", "vllm", {"reason": "engine_core_died"}),
        (45, "fault", "vllm", {"reason": "illegal_memory_access"}),
        (52, "fault", "vllm", {"reason": "illegal_memory_access"}),
        (59, "engine_died", "vllm", {"reason": "engine_core_fatal"}),
    ],
    "sglang.log": [
        (3, "engine_died", "sglang", {"reason": "scheduler_exception"}),
        (10, "oom", "sglang", {"requested_bytes": mib(616), "gpu_index": 0, "phase": "serve"}),
        (11, "oom", "sglang", {"reason": "mem_fraction_static", "phase": "load"}),
        (12, "engine_died", "sglang", {"reason": "child_failed"}),
    ],
    "tgi.log": [
        (
            3,
            "oom",
            "tgi",
            {
                "requested_bytes": mib(128),
                "allowed_bytes": gib(15.77),
                "reserved_bytes": gib(15.40),
            },
        ),
        (5, "engine_died", "tgi", {"reason": "shard_failed"}),
        (
            8,
            "oom",
            "tgi",
            {
                "requested_bytes": mib(222),
                "free_bytes": mib(217.94),
                "process_used_bytes": gib(39.17),
            },
        ),
        (9, "oom", "tgi", {"reason": "prefill_tokens", "prefill_tokens": 4096, "phase": "warmup"}),
        (
            11,
            "oom",
            "tgi",
            {
                "reason": "allocation_exceeds_limit",
                "phase": "warmup",
                "allocated_bytes": gib(16.08),
                "requested_bytes": gib(4.83),
                "capacity_bytes": gib(22.20),
                "free_bytes": mib(11.12),
            },
        ),
        (13, "engine_died", "tgi", {"reason": "webserver_crashed"}),
    ],
    "ollama.log": [
        (4, "oom", "ollama", {"reason": "cuda_oom"}),
        (6, "engine_died", "ollama", {"reason": "runner_terminated"}),
        (11, "engine_died", "ollama", {"reason": "runner_terminated"}),
        (12, "restart", "ollama", {}),
    ],
    "llamacpp.log": [
        (
            4,
            "oom",
            "llamacpp",
            {
                "reason": "cuda_malloc_failed",
                "gpu_index": 0,
                "requested_bytes": 151851674624,
                "phase": "load",
                "end_line": 6,
            },
        ),
        (8, "oom", "llamacpp", {"gpu_index": 1, "requested_bytes": 54262464512}),
        (13, "oom", "llamacpp", {"reason": "cuda_oom"}),
        (17, "oom", "llamacpp", {"gpu_index": 4, "requested_bytes": 150995968}),
    ],
    "kv-pressure.log": [
        (3, "oom", "vllm", {"reason": "cuda_oom", "phase": "warmup", "pid": 10948}),
        (
            6,
            "oom",
            "vllm",
            {
                "gpu_index": 1,
                "requested_bytes": gib(1.74),
                "allocated_bytes": gib(20.21),
                "reserved_bytes": gib(20.21) + mib(185.98),
            },
        ),
        (7, "oom", "vllm", {"gpu_index": 0, "free_bytes": mib(594.88)}),
        (9, "kv_pressure", "sglang", {"reason": "retracted"}),
        (
            10,
            "oom",
            "sglang",
            {
                "reason": "kv_pool_exhausted",
                "end_line": 12,
                "requested_tokens": 148,
                "available_tokens": 2048,
            },
        ),
    ],
    "kernel.log": [
        (
            5,
            "xid",
            "kernel",
            {"xid": 31, "pid": 169800, "process_name": "chrome", "pci_bus_id": "0000:08:00"},
        ),
        (
            7,
            "xid",
            "kernel",
            {"xid": 31, "pid": 13332, "card_uuid": "GPU-760d0170-b7c5-6817-9414-6cc7112645de"},
        ),
        (8, "xid", "kernel", {"xid": 62, "pci_bus_id": "0000:0a:00"}),
        (9, "xid", "kernel", {"xid": 45}),
        (10, "xid", "kernel", {"xid": 45}),
        (13, "xid", "kernel", {"xid": 31, "pid": 12890, "pci_bus_id": "0000:c1:00"}),
        (14, "xid", "kernel", {"xid": 79, "pci_bus_id": "0000:b3:00", "end_line": 16}),
        (19, "xid", "kernel", {"xid": 79, "pci_bus_id": "0000:44:00"}),
    ],
}


def _events(name: str, engine: str | None = None) -> list[dict]:
    with open(FIXTURES / name, encoding="utf-8") as log:
        return [event.as_dict() for event in scan_lines(log, engine)]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_line_of_each_fixture_is_classified_right(name):
    events = sorted(_events(name), key=lambda event: event["line"])
    assert [(e["line"], e["kind"], e["engine"]) for e in events] == [
        (line, kind, engine) for line, kind, engine, _ in EXPECTED[name]
    ]
    for event, (line, _, _, fields) in zip(events, EXPECTED[name], strict=True):
        for key, value in fields.items():
            assert event.get(key) == value, (name, line, key)


def test_every_fixture_cites_its_sources_and_is_covered():
    for path in FIXTURES.glob("*.log"):
        header = path.read_text().splitlines()[:4]
        assert header[0].startswith("# Real"), path.name
        assert "#" in "".join(header[1:]), path.name  # repo#issue citations
        assert path.name in EXPECTED, path.name


def test_a_line_it_does_not_recognise_is_never_an_oom():
    advice = [
        "INFO 03-27 10:29:03 [model_runner.py:1442] If out-of-memory error occurs during "
        "cudagraph capture, consider decreasing `gpu_memory_utilization`.",
        "CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of "
        "memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode.",
        "ggml_cuda_host_malloc: failed to allocate 1900,00 MiB of pinned memory: invalid argument",
        "[2025-08-04 10:10:08] KV Cache is allocated. #tokens: 30192, K size: 1.38 GB",
        '    raise ValueError("No available memory for the cache blocks. "',
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        "",
        "\x00\x01 garbage \xff",
    ]
    assert list(scan_lines(advice)) == []


def test_a_traceback_is_one_event_at_its_first_line_with_the_figures_of_its_exception():
    log = [
        "INFO starting",
        "Traceback (most recent call last):",
        '  File "/opt/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py",'
        " line 2, in capture_model",
        "    self._capture()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 3 has a "
        "total capacity of 79.19 GiB of which 6.00 MiB is free. Of the allocated memory 70.00 GiB"
        " is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "RuntimeError: CUDA error: out of memory",
        "INFO next",
    ]
    (event,) = scan_lines(log)
    assert (event.line, event.kind, event.engine) == (2, "oom", "vllm")
    assert event.detail["phase"] == "cuda_graph_capture"
    assert event.detail["gpu_index"] == 3
    assert event.detail["reserved_bytes"] == gib(71.0)
    assert event.detail["end_line"] == 11


def test_interleaved_tracebacks_of_two_workers_stay_apart():
    log = []
    for rank in (0, 1):
        log.append(
            f"(VllmWorker TP{rank} pid=10{rank}) ERROR 01-01 00:00:00 [x.py:1] Traceback "
            "(most recent call last):"
        )
    for rank in (0, 1):
        log.append(f'(VllmWorker TP{rank} pid=10{rank}) ERROR 01-01 00:00:00 [x.py:1]   File "a"')
    log.append(
        "(VllmWorker TP0 pid=100) ERROR 01-01 00:00:00 [x.py:1] RuntimeError: CUDA error: "
        "an illegal memory access was encountered"
    )
    log.append(
        "(VllmWorker TP1 pid=101) ERROR 01-01 00:00:00 [x.py:1] torch.OutOfMemoryError: "
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of "
        "80.00 GiB of which 1.00 GiB is free."
    )
    events = sorted(scan_lines(log), key=lambda e: e.line)
    assert [(e.line, e.kind) for e in events] == [(1, "fault"), (2, "oom")]
    assert events[1].detail["gpu_index"] == 1


def test_the_same_message_retold_by_each_thread_is_one_event_but_a_later_one_is_new():
    assertion = (
        "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:702: indexSelectLargeIndex: "
        "block: [32,0,0], thread: [{t},0,0] Assertion `srcIndex < srcSelectDimSize` "
        "failed."
    )
    log = [assertion.format(t=t) for t in range(100)]
    log += ["INFO serving"] * 60 + [assertion.format(t=0)]
    assert [(e.line, e.kind) for e in scan_lines(log)] == [(1, "fault"), (161, "fault")]


def test_the_engine_given_on_the_command_line_wins_and_the_output_is_json_lines(tmp_path):
    path = tmp_path / "engine.log"
    path.write_text("RuntimeError: CUDA error: out of memory\n")
    result = subprocess.run(
        [sys.executable, "-m", "inventory.agent.logscan", str(path), "--engine", "sglang"],
        capture_output=True,
        text=True,
        check=True,
    )
    (line,) = result.stdout.splitlines()
    assert json.loads(line) | {"message": None} == {
        "line": 1,
        "kind": "oom",
        "engine": "sglang",
        "reason": "cuda_oom",
        "phase": "serve",
        "message": None,
    }
    missing = subprocess.run(
        [sys.executable, "-m", "inventory.agent.logscan", str(tmp_path / "none.log")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "logscan:" in missing.stderr


def test_prefixes_are_peeled_and_the_process_tag_kept_as_the_stream():
    assert split_prefix(
        "(EngineCore_DP0 pid=7) ERROR 10-25 13:08:43 [core.py:708]     raise X"
    ) == ("(EngineCore_DP0 pid=7)", "    raise X")
    assert split_prefix("Mar 15 11:39:07 host ollama[87551]: msg") == ("", "msg")
    assert split_prefix("[2025-08-06 20:26:20 TP3] Scheduler hit")[0] == "TP3"
    assert split_prefix("\x1b[31mERROR\x1b[0m 01-26 09:25:37 [core.py:935] ValueError: x") == (
        "",
        "ValueError: x",
    )


def test_figures_read_decimal_commas_and_bytes():
    assert read_figures("Tried to allocate 1900,50 MiB")["requested_bytes"] == mib(1900.5)
    assert read_figures("of which 0 bytes is free")["free_bytes"] == 0


def test_a_start_is_a_restart_only_after_an_earlier_start_or_death():
    scanner = LogScanner("vllm")
    banner = "INFO 01-01 00:00:00 [api_server.py:1] Starting vLLM API server on http://0:8000"
    assert scanner.feed(banner) == []
    (restart,) = scanner.feed(banner)
    assert (restart.line, restart.kind) == (2, "restart")
