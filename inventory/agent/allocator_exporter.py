"""The caching allocator's figures of a PyTorch serving process, for the host agent.

nvidia-smi sees what a process reserved from the card; only PyTorch knows how much of that is
allocated, how much is cached and how much is split into blocks too small to use. This module,
loaded into the serving process, answers with `torch.cuda.memory_stats()` per device:

    GET /metrics        Prometheus text, one series per figure and device
    GET /memory_stats   JSON: [{"pid", "device", "memory_stats": {...},
                                "largest_free_block_bytes"}], what the host agent reads

Load it:
  - vLLM: the engine plugin (deploy/engine-plugin, the distribution
    `gpu-colocation-allocator-exporter`, this module as `gpu_console_allocator_exporter`)
    installed in the engine's environment is a general plugin (the `vllm.general_plugins`
    entry point `allocator_exporter`), loaded in every vLLM process;
  - any other PyTorch server: `import gpu_console_allocator_exporter as e; e.start();
    e.publish()` in its launcher.

It binds 127.0.0.1 and the first free port from ALLOCATOR_EXPORTER_PORT (9464) on, one per
process (an API server without CUDA answers with no device, each tensor-parallel worker with
its own), and the agent reads them in turn from that first port on. It never initialises CUDA
itself: a process that has not touched the GPU reports no device. The largest free block needs
the allocator's segment snapshot, which costs a walk over every block: only with
ALLOCATOR_EXPORTER_SEGMENTS=1.

In a container neither reaches the host agent as it is: 127.0.0.1 is the container's own
network namespace, and os.getpid() is a PID of the container's PID namespace, not the host PID
NVML reports. With ALLOCATOR_EXPORTER_DIR set (a host folder the container mounts,
docs/deploy.md), `publish()` also writes the same rows every ALLOCATOR_EXPORTER_INTERVAL_S (5 s)
to `<dir>/<pid>-<starttime>.json`: the process's own PID and its start time (clock ticks after
boot, the same seen from every PID namespace), which the agent finds again in the host's /proc
(NSpid, stat) to learn the host PID.

Nothing here imports the console: it runs inside the engine, with the standard library and
torch only, on Python 3.10 and later.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEFAULT_PORT = 9464
DEFAULT_INTERVAL_S = 5.0
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
# The file publisher of this process: its stop event and the file it keeps up to date.
_publishing: tuple[threading.Event, threading.Thread, Path] | None = None


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


def identity() -> tuple[int, int]:
    """This process's PID in its own PID namespace and its start time in clock ticks after
    boot (field 22 of /proc/<pid>/stat), which the host reads the same for this process."""
    with open("/proc/self/stat") as stat:
        text = stat.read()
    # The command name (field 2) may hold spaces and ")": the fields after its last ")" are
    # field 3 on.
    return os.getpid(), int(text.rsplit(")", 1)[1].split()[19])


def write_snapshot(directory: Path) -> Path:
    """This process's rows into `<directory>/<pid>-<starttime>.json`, whole or not at all."""
    pid, started = identity()
    path = directory / f"{pid}-{started}.json"
    body = json.dumps({"ns_pid": pid, "starttime": started, "rows": device_stats()})
    partial = directory / f".{path.name}.partial"
    # 0644 whatever the engine's umask: the agent runs as another user, and the figures are
    # no secret.
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o644)
        out.write(body)
    os.replace(partial, path)  # the agent never reads half a file
    return path


def publish(directory: str | None = None, interval_s: float | None = None) -> Path | None:
    """Keep this process's snapshot in `directory` (ALLOCATOR_EXPORTER_DIR) from a daemon
    thread, rewritten every interval; return its path, None without a directory. A clean exit
    removes the file. Idempotent within a process."""
    global _publishing
    directory = directory or os.environ.get("ALLOCATOR_EXPORTER_DIR")
    if not directory:
        return None
    with _lock:
        if _publishing is not None:
            return _publishing[2]
        every = interval_s or float(
            os.environ.get("ALLOCATOR_EXPORTER_INTERVAL_S", DEFAULT_INTERVAL_S)
        )
        path = write_snapshot(Path(directory))  # a folder that is not there fails here, once
        stop = threading.Event()
        thread = threading.Thread(
            target=_keep_writing,
            args=(Path(directory), every, stop),
            name="allocator-exporter-file",
            daemon=True,
        )
        thread.start()
        _publishing = (stop, thread, path)
        return path


def _keep_writing(directory: Path, every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        # A failed write (the allocator's figures, a full disk) costs one snapshot; the agent
        # takes a file that stops changing for gone.
        with contextlib.suppress(Exception):
            write_snapshot(directory)


def unpublish() -> None:
    """Stop writing and remove this process's snapshot."""
    global _publishing
    with _lock:
        if _publishing is None:
            return
        stop, thread, path = _publishing
        _publishing = None
        stop.set()
        thread.join()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _forget_in_child() -> None:
    # A forked child (a vLLM worker) is another process with a file of its own; the parent's
    # thread did not come along, and the parent's file stays the parent's.
    global _publishing
    _publishing = None


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(unpublish)


def vllm_plugin() -> None:
    """vLLM's general-plugin hook: called in every vLLM process, before the model loads."""
    # Neither may stop the engine: with every port taken, no snapshot folder or an allocator
    # that fails its first reading, it serves on without that way of reading it.
    with contextlib.suppress(OSError):
        start()
    with contextlib.suppress(Exception):
        publish()


# A quick look: python -m gpu_console_allocator_exporter (in a checkout: -m
# inventory.agent.allocator_exporter).
if __name__ == "__main__":
    print(json.dumps(device_stats(), indent=2))
