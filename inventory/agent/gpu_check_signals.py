"""The real-host signal checks of `python -m inventory.agent.gpu_check --signals`.

5. oom: a child process allocates 1 GiB blocks until CUDA refuses one (with PyTorch if it is
   installed, printing PyTorch's own OOM traceback to its log; else through the driver API,
   printing the CUDA runtime's phrasing), holds the card full for a moment and exits. The agent
   (HostRuntime on the real NVML path, the child's log as the deployment's engine log) must
   record the exit, a probable OOM, and the OOM from the log.
6. mps kill: two clients under an MPS control daemon; the MPS server is killed; the agent's
   MPS monitor must raise mps_server_down naming both clients.
7. exporter: a PyTorch child loads the allocator exporter; what the agent reads must equal
   `torch.cuda.memory_stats()` in that process. Skipped, and said so, without PyTorch.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

GIB = 1 << 30
CUDA_ERROR_OUT_OF_MEMORY = 2


def gpu_unavailable() -> str | None:
    """Why no GPU check can run here, or None when NVML sees a card."""
    try:
        import pynvml
    except ImportError as error:
        return f"nvidia-ml-py is not installed ({error})"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as error:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return f"NVML unavailable: {type(error).__name__}: {error}"
    return None if count > 0 else "NVML sees no GPU"


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


# --- children -----------------------------------------------------------------------------


def _fill_until_oom(device: int, log_path: str, hold_s: float, ready) -> None:
    """Child: take 1 GiB blocks (then 64 MiB ones) until CUDA says out of memory, hold, log it."""
    with open(log_path, "a") as log:
        if _has_torch():
            import torch

            blocks = []
            try:
                while True:
                    blocks.append(torch.empty(GIB, dtype=torch.uint8, device=f"cuda:{device}"))
            except torch.cuda.OutOfMemoryError:
                ready.set()
                time.sleep(hold_s)
                log.write(traceback.format_exc())
                log.flush()
                os._exit(1)
        cuda = ctypes.CDLL("libcuda.so.1")
        cuda.cuInit(0)
        handle, context = ctypes.c_int(), ctypes.c_void_p()
        cuda.cuDeviceGet(ctypes.byref(handle), device)
        cuda.cuCtxCreate_v2(ctypes.byref(context), 0, handle)
        for chunk in (GIB, 64 << 20):
            while True:
                pointer = ctypes.c_uint64()
                result = cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(chunk))
                if result == CUDA_ERROR_OUT_OF_MEMORY:
                    break
                if result != 0:
                    raise RuntimeError(f"cuMemAlloc failed with CUDA error {result}")
        ready.set()
        time.sleep(hold_s)
        log.write("RuntimeError: CUDA error: out of memory\n")
        log.flush()
        os._exit(1)


def _exporter_child(device: int, port: int, answer, release) -> None:
    import torch

    from inventory.agent.allocator_exporter import start

    kept = [torch.empty(512 << 20, dtype=torch.uint8, device=f"cuda:{device}") for _ in range(3)]
    del kept[1]  # a freed block: reserved stays above allocated
    bound = start(port)
    stats = torch.cuda.memory_stats(device)
    answer.put((bound, stats["reserved_bytes.all.current"], stats["allocated_bytes.all.current"]))
    release.wait(120)


# --- the agent on the real NVML path --------------------------------------------------------


def _runtime(pynvml, host: str, options, entries: list[dict]):
    from inventory.agent.runtime import HostRuntime
    from inventory.agent.sources import NvmlSource

    batches: list[dict] = []
    runtime = HostRuntime(host, NvmlSource(pynvml, time.time, options), batches.append)
    runtime.apply_plan(
        {"host": host, "collector": "nvml", "sample_interval_s": 0.5, "flush_interval_s": 1.0,
         "scrape_interval_s": 3600.0, "deployments": entries}
    )  # fmt: skip
    return runtime, batches


def _run_until(runtime, batches, done, timeout_s: float, each=None) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if each is not None:
            each()
        runtime.tick()
        runtime.publish_pending()
        events = [event for batch in batches for event in batch["events"]]
        if done(events):
            break
        time.sleep(0.5)
    runtime.flush(time.time())
    runtime.publish_pending()
    return [event for batch in batches for event in batch["events"]]


def _card_uuid(pynvml, device: int) -> str:
    pynvml.nvmlInit()
    try:
        return pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(device))
    finally:
        pynvml.nvmlShutdown()


def check_oom(pynvml, context, args, host: str) -> dict[str, Any]:
    from inventory.agent.signals import SignalOptions
    from inventory.telemetry.process_events import LifecycleSettings

    workdir = Path(tempfile.mkdtemp(prefix="gpu-check-oom-"))
    log = workdir / "engine.log"
    log.write_text("")
    ready = context.Event()
    child = context.Process(target=_fill_until_oom, args=(args.device, str(log), 5.0, ready))
    child.start()
    if not ready.wait(120):
        child.kill()
        return {"ok": False, "reason": "the child never filled the card"}
    options = SignalOptions(lifecycle=LifecycleSettings(exit_grace_s=2.0))
    entry = {"deployment_id": "gpu-check-oom", "engine": "pytorch" if _has_torch() else None,
             "device_uuids": [_card_uuid(pynvml, args.device)], "pids": [child.pid],
             "log_path": str(log)}  # fmt: skip
    runtime, batches = _runtime(pynvml, host, options, [entry])

    def done(events):
        kinds = {(e["kind"], e["detail"].get("source")) for e in events}
        return ("process_exit", None) in kinds and ("oom", "engine_log") in kinds

    events = _run_until(runtime, batches, done, 60.0)
    child.join(10)
    exits = [e for e in events if e["kind"] == "process_exit" and e["detail"]["pid"] == child.pid]
    ooms = [e for e in events if e["kind"] == "oom"]
    print("\n5. oom: a process allocates until CUDA runs out of memory, then exits")
    for event in exits + ooms:
        detail = {k: v for k, v in event["detail"].items() if k != "processes"}
        print(f"   {event['kind']}: {detail}")
    if not exits:
        ok, reason = False, "no process_exit event for the child"
    elif not exits[0]["detail"]["probable_oom"]:
        ok, reason = False, "the exit was not judged a probable OOM"
    elif not any(e["detail"].get("source") == "engine_log" for e in ooms):
        ok, reason = False, "the OOM in the child's log was not recorded"
    else:
        evidence = exits[0]["detail"]["oom_evidence"]
        ok, reason = True, f"exit recorded as a probable OOM ({', '.join(evidence)}), log OOM too"
    print(("   PASS: " if ok else "   FAIL: ") + reason)
    return {"ok": ok, "reason": reason, "events": events, "log": log.read_text()[-4000:]}


def private_mps_daemon(check: str, prefix: str) -> tuple[str, dict, dict] | None:
    """An MPS control daemon of the check's own, in pipe and log folders of its own: the
    control binary, those folders' variables, and the environment it runs in; None (and said)
    where the binary is not installed."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        print(f"\n{check}: skipped, nvidia-cuda-mps-control is not installed")
        return None
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(workdir / "pipe"),
           "CUDA_MPS_LOG_DIRECTORY": str(workdir / "log")}  # fmt: skip
    for folder in env.values():
        Path(folder).mkdir()
    daemon_env = {**os.environ, **env}
    subprocess.run([control, "-d"], env=daemon_env, check=True, timeout=30)
    return control, env, daemon_env


def check_mps_kill(pynvml, context, args, host: str) -> dict[str, Any]:
    from inventory.agent.mps import MpsControl, MpsMonitor
    from inventory.agent.signals import SignalOptions

    started = private_mps_daemon("6. mps kill", "gpu-check-mps-kill-")
    if started is None:
        return {"ok": None, "reason": "nvidia-cuda-mps-control not installed"}
    control, env, daemon_env = started
    holders = []
    monitor = MpsMonitor(MpsControl(control, env["CUDA_MPS_PIPE_DIRECTORY"]))
    try:
        # gpu_check's own Holder (given through args: gpu_check imports this module)
        holders = [args.holder(context, args.device, 512, env=env) for _ in range(2)]
        clients = {holder.pid for holder in holders}
        runtime, batches = _runtime(pynvml, host, SignalOptions(mps=monitor), [])
        _run_until(
            runtime, batches, lambda _: bool(monitor.live and monitor.live[0]["clients"]), 30.0,
            each=monitor.refresh,
        )  # fmt: skip
        live = list(monitor.live)
        if not live:
            return {"ok": False, "reason": "the MPS monitor never saw the server"}
        os.kill(live[0]["server_pid"], signal.SIGKILL)
        events = _run_until(
            runtime, batches, lambda e: any(x["kind"] == "mps_server_down" for x in e), 30.0,
            each=monitor.refresh,
        )  # fmt: skip
    finally:
        for holder in holders:
            with contextlib.suppress(Exception):
                holder.process.kill()
        with contextlib.suppress(subprocess.SubprocessError):
            subprocess.run([control], input="quit\n", text=True, env=daemon_env, timeout=30)
    downs = [e for e in events if e["kind"] == "mps_server_down"]
    print(f"\n6. mps kill: server {live[0]['server_pid']} killed with clients {sorted(clients)}")
    if not downs:
        ok, reason = False, "no mps_server_down event"
    else:
        named = {client["pid"] for client in downs[0]["detail"]["clients"]}
        ok = clients <= named
        reason = f"mps_server_down ({downs[0]['detail']['cause']}) names clients {sorted(named)}"
    print(("   PASS: " if ok else "   FAIL: ") + reason)
    return {"ok": ok, "reason": reason, "live_before": live, "events": downs}


def check_exporter(pynvml, context, args, host: str) -> dict[str, Any]:
    from inventory.agent import allocator_scrape
    from inventory.telemetry.engines import http_fetch

    if not _has_torch():
        print("\n7. exporter: skipped, PyTorch is not installed on this machine")
        return {"ok": None, "reason": "torch not installed"}
    answer, release = context.Queue(), context.Event()
    port = 19464
    child = context.Process(target=_exporter_child, args=(args.device, port, answer, release))
    child.start()
    try:
        bound, reserved, allocated = answer.get(timeout=120)
        read = allocator_scrape.read(http_fetch, f"http://127.0.0.1:{bound}/metrics")
    finally:
        release.set()
        child.join(10)
    mine = read.get(child.pid, {})
    print("\n7. exporter: the agent's reading of torch.cuda.memory_stats() in a PyTorch process")
    print(f"   torch: reserved {reserved}, allocated {allocated}; agent read {mine}")
    ok = mine.get("reserved_bytes") == reserved and mine.get("allocated_bytes") == allocated
    reason = "figures match" if ok else "figures differ"
    print(("   PASS: " if ok else "   FAIL: ") + reason)
    return {"ok": ok, "reason": reason, "torch": [reserved, allocated], "agent": mine}


CHECKS = {"oom": check_oom, "mps_kill": check_mps_kill, "exporter": check_exporter}
