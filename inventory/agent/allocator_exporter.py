"""The caching allocator's figures of a PyTorch serving process, on a local HTTP port.

nvidia-smi sees what a process reserved from the card; only PyTorch knows how much of that is
allocated, how much is cached and how much is split into blocks too small to use. This module,
loaded into the serving process, answers with `torch.cuda.memory_stats()` per device:

    GET /metrics        Prometheus text, one series per figure and device
    GET /memory_stats   JSON: [{"pid", "device", "memory_stats": {...},
                                "largest_free_block_bytes"}], what the host agent reads

Load it:
  - vLLM: installed in the engine's environment, it is a general plugin (the
    `vllm.general_plugins` entry point `allocator_exporter`), loaded in every vLLM process;
  - any other PyTorch server: `import inventory.agent.allocator_exporter as e; e.start()`, or
    `python -c "import inventory.agent.allocator_exporter as e; e.start(); ..."` in its launcher.

It binds 127.0.0.1 and the first free port from ALLOCATOR_EXPORTER_PORT (9464) on, one per
process (an API server without CUDA answers with no device, each tensor-parallel worker with
its own), and the agent reads them in turn from that first port on. It never initialises CUDA
itself: a process that has not touched the GPU reports no device. The largest free block needs
the allocator's segment snapshot, which costs a walk over every block: only with
ALLOCATOR_EXPORTER_SEGMENTS=1.

Nothing here imports the console: it runs inside the engine, with the standard library and
torch only.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_PORT = 9464
PORT_SPAN = 16  # processes per host that can each get a port of their own
# memory_stats() keys exported, and the Prometheus names they get
FIGURES = {
    "reserved_bytes.all.current": "reserved_bytes",
    "reserved_bytes.all.peak": "reserved_peak_bytes",
    "allocated_bytes.all.current": "allocated_bytes",
    "allocated_bytes.all.peak": "allocated_peak_bytes",
    "active_bytes.all.current": "active_bytes",
    "inactive_split_bytes.all.current": "inactive_split_bytes",
    "num_alloc_retries": "alloc_retries",
    "num_ooms": "ooms",
}

_server: ThreadingHTTPServer | None = None
_lock = threading.Lock()


def _torch():
    import torch  # only in the engine's process, which has it

    return torch


def device_stats(torch: Any = None) -> list[dict]:
    """One entry per CUDA device this process has used."""
    torch = torch or _torch()
    cuda = torch.cuda
    if not cuda.is_available() or not cuda.is_initialized():
        return []
    segments = os.environ.get("ALLOCATOR_EXPORTER_SEGMENTS") == "1"
    rows = []
    for device in range(cuda.device_count()):
        stats = cuda.memory_stats(device)
        if not stats:
            continue
        rows.append(
            {
                "pid": os.getpid(),
                "device": device,
                "memory_stats": {key: stats[key] for key in FIGURES if key in stats},
                "largest_free_block_bytes": _largest_free_block(torch, device)
                if segments
                else None,
            }
        )
    return rows


def _largest_free_block(torch: Any, device: int) -> int | None:
    largest = 0
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device") != device:
            continue
        for block in segment.get("blocks", ()):
            if block.get("state") == "inactive":
                largest = max(largest, int(block.get("size", 0)))
    return largest


def prometheus_text(rows: list[dict]) -> str:
    lines = []
    for key, name in FIGURES.items():
        metric = f"torch_cuda_allocator_{name}"
        lines.append(
            f"# TYPE {metric} {'counter' if name in ('alloc_retries', 'ooms') else 'gauge'}"
        )
        for row in rows:
            if key in row["memory_stats"]:
                labels = f'pid="{row["pid"]}",device="{row["device"]}"'
                lines.append(f"{metric}{{{labels}}} {row['memory_stats'][key]}")
    largest = [row for row in rows if row.get("largest_free_block_bytes") is not None]
    if largest:
        lines.append("# TYPE torch_cuda_allocator_largest_free_block_bytes gauge")
        for row in largest:
            labels = f'pid="{row["pid"]}",device="{row["device"]}"'
            lines.append(
                f"torch_cuda_allocator_largest_free_block_bytes{{{labels}}} "
                f"{row['largest_free_block_bytes']}"
            )
    return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path not in ("/metrics", "/memory_stats"):
            self.send_error(404)
            return
        try:
            rows = device_stats()
        except Exception as error:  # the engine's allocator must never take the engine down
            self.send_error(500, type(error).__name__)
            return
        if path == "/metrics":
            body, kind = prometheus_text(rows).encode(), "text/plain; version=0.0.4"
        else:
            body, kind = json.dumps(rows).encode(), "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return  # the engine's own log stays the engine's


def start(port: int | None = None, host: str = "127.0.0.1") -> int:
    """Serve from a daemon thread; return the port. Idempotent within a process."""
    global _server
    with _lock:
        if _server is not None:
            return _server.server_address[1]
        base = (
            port
            if port is not None
            else int(os.environ.get("ALLOCATOR_EXPORTER_PORT", DEFAULT_PORT))
        )
        last_error: OSError | None = None
        for candidate in range(base, base + PORT_SPAN):
            try:
                _server = ThreadingHTTPServer((host, candidate), _Handler)
                break
            except OSError as error:
                last_error = error
        else:
            raise OSError(f"no free port in {base}-{base + PORT_SPAN - 1}: {last_error}")
        _server.daemon_threads = True
        threading.Thread(
            target=_server.serve_forever, name="allocator-exporter", daemon=True
        ).start()
        return _server.server_address[1]


def stop() -> None:
    global _server
    with _lock:
        if _server is not None:
            _server.shutdown()
            _server.server_close()
            _server = None


def vllm_plugin() -> None:
    """vLLM's general-plugin hook: called in every vLLM process, before the model loads."""
    with contextlib.suppress(OSError):  # every port taken: the engine serves on without it
        start()


if __name__ == "__main__":  # a quick look: python -m inventory.agent.allocator_exporter
    print(json.dumps(device_stats(), indent=2))
