"""Check the real NVML path on a machine with an NVIDIA GPU.

    python -m inventory.agent.gpu_check [--sizes-mib 1024,2048,3072] [--device 0]
        [--agent-seconds 10] [--agent-process [--broker-archive OUT.tar.gz]] [--mps]
        [--json OUT] [--batches OUT]

Child processes allocate exact amounts of device memory with the CUDA driver API (cuMemAlloc
through ctypes: no PyTorch needed) and the console's own code reads the card through pynvml:

1. processes: one process per size; one poll of NvmlCollector, the host agent's collector.
   NVML's figure for each process is its allocation plus its CUDA context; the check passes
   when every process is found, that excess is the same for all of them (within
   --tolerance-mib) and, where nvidia-smi is installed, it reports the same per-process MiB.
2. agent: the host agent's HostRuntime (sampler and outbox, the code that publishes batches)
   polls the card while one process holds a base allocation and, for two seconds between
   flushes, a peak on top. The batch must keep the peak as its maximum and the base as its
   last value: a short peak is not lost.
3. agent process (--agent-process): the same through the agent as deployed, a Celery worker
   sent a collection plan over a folder broker, with no database and no DATABASE_URL; its
   process must also map to the plan's deployment. --broker-archive keeps the messages.
4. mps (--mps): starts an MPS control daemon with its own pipe directory, runs one client
   under it, checks that the client is recorded once, as an MPS process, then stops the daemon.
5-7. signals (--signals, inventory/agent/gpu_check_signals.py): a process that allocates until
   CUDA OOM is recorded as an exit and, with its log, as an OOM; an MPS server killed with two
   clients raises mps_server_down naming both; the allocator exporter's figures match
   torch.cuda.memory_stats() (skipped, and said so, without PyTorch).

Without a GPU (no driver, no NVML, no card) every check is skipped with the reason, exit 0.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import ctypes
import io
import json
import multiprocessing
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from inventory.wire import signing

MIB = 1024 * 1024
PEAK_WINDOW_S = (1.0, 3.0)  # seconds into the agent run; the first flush comes after it


def _hold_allocation(device: int, base_mib: int, peak_mib: int, env: dict, signals: dict):
    """Child process: hold `base_mib` on `device`; add `peak_mib` while the parent asks."""
    os.environ.update(env)  # before cuInit: MPS clients find their server through it
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(result: int, call: str) -> None:
        if result != 0:
            raise RuntimeError(f"{call} failed with CUDA error {result}")

    def allocate(size_mib: int) -> ctypes.c_uint64:
        pointer = ctypes.c_uint64()
        size = ctypes.c_size_t(size_mib * MIB)
        check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), size), "cuMemAlloc")
        # Touch the memory so no driver could defer the allocation.
        check(cuda.cuMemsetD8_v2(pointer, 0xAB, size), "cuMemsetD8")
        check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
        return pointer

    check(cuda.cuInit(0), "cuInit")
    handle = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(handle), device), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, handle), "cuCtxCreate")
    base = allocate(base_mib)
    signals["ready"].set()
    if peak_mib:
        signals["peak_on"].wait(300)
        peak = allocate(peak_mib)
        signals["peak_held"].set()
        signals["peak_off"].wait(300)
        check(cuda.cuMemFree_v2(peak), "cuMemFree")
        check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
        signals["peak_freed"].set()
    signals["release"].wait(300)
    cuda.cuMemFree_v2(base)


class Holder:
    """A child process holding device memory: a base allocation, and a peak on request."""

    SIGNALS = ("ready", "peak_on", "peak_held", "peak_off", "peak_freed", "release")

    def __init__(self, context, device: int, base_mib: int, peak_mib: int = 0, env=None):
        self.base_mib, self.peak_mib = base_mib, peak_mib
        self.signals = {name: context.Event() for name in self.SIGNALS}
        args = (device, base_mib, peak_mib, dict(env or {}), self.signals)
        self.process = context.Process(target=_hold_allocation, args=args, daemon=True)
        self.process.start()
        self._await("ready", f"the {base_mib} MiB allocation")

    @property
    def pid(self) -> int:
        return self.process.pid

    def peak(self, on: bool) -> None:
        self.signals["peak_on" if on else "peak_off"].set()
        self._await("peak_held" if on else "peak_freed", f"the {self.peak_mib} MiB peak")

    def release(self) -> None:
        self.signals["release"].set()
        self.process.join(30)

    def _await(self, signal: str, what: str) -> None:
        deadline = time.monotonic() + 120
        while not self.signals[signal].wait(0.2):
            if not self.process.is_alive() or time.monotonic() > deadline:
                code = self.process.exitcode
                raise RuntimeError(f"{what} did not complete (child exit code {code})")


# --- 1. processes -------------------------------------------------------------------------


@dataclass
class Row:
    pid: int
    allocated_mib: int
    nvml_used_mib: float | None
    excess_mib: float | None
    smi_used_mib: float | None = None


def compare(allocations: dict[int, int], poll, device: int) -> list[Row]:
    """Each allocating process as NVML saw it in `poll` (a PollResult of NvmlCollector)."""
    card = next(card for card in poll.cards if card.index == device)
    seen = {process.pid: process.used_bytes for process in card.processes}
    rows = []
    for pid, size_mib in allocations.items():
        used = seen.get(pid)
        used_mib = None if used is None else used / MIB
        rows.append(Row(pid, size_mib, used_mib, None if used is None else used_mib - size_mib))
    return rows


def parse_smi_csv(text: str) -> list[list[str]]:
    """Rows of `nvidia-smi --query-...  --format=csv,noheader,nounits`, fields stripped."""
    return [[field.strip() for field in row] for row in csv.reader(io.StringIO(text)) if row]


def add_smi_figures(rows: list[Row], smi_apps: str) -> None:
    """Fill each row's smi_used_mib from `nvidia-smi --query-compute-apps=pid,used_memory`."""
    by_pid = {int(pid): float(used) for pid, used in parse_smi_csv(smi_apps) if used.isdecimal()}
    for row in rows:
        row.smi_used_mib = by_pid.get(row.pid)


def verdict(rows: list[Row], tolerance_mib: float) -> tuple[bool, str]:
    missing = [row.pid for row in rows if row.nvml_used_mib is None]
    if missing:
        # NVML sees a container's processes and their memory from the host; inside a container
        # with its own PID namespace it lists them under host PIDs, which are not the PIDs
        # this check started them as.
        return False, (
            f"NVML did not report processes {missing} under these PIDs (run in a container "
            "with its own PID namespace, NVML lists host PIDs)"
        )
    excess = [row.excess_mib for row in rows]
    spread = max(excess) - min(excess)
    if min(excess) < 0:
        return False, "NVML reported less than a process allocated"
    if spread > tolerance_mib:
        return False, f"context overhead differs by {spread:.0f} MiB between processes"
    disagree = [
        row.pid
        for row in rows
        if row.smi_used_mib is not None and abs(row.smi_used_mib - row.nvml_used_mib) > 1
    ]
    if disagree:
        return False, f"nvidia-smi reports other per-process memory for {disagree}"
    checked = " and nvidia-smi agrees" if any(r.smi_used_mib is not None for r in rows) else ""
    return True, (
        f"every process found; context overhead {min(excess):.0f}-{max(excess):.0f} MiB{checked}"
    )


def _nvidia_smi(*query: str) -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    command = ["nvidia-smi", *query, "--format=csv,noheader,nounits"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    return result.stdout if result.returncode == 0 else None


def check_processes(pynvml, context, args, host: str) -> dict[str, Any]:
    from inventory.telemetry.collector import NvmlCollector

    holders = []
    collector = NvmlCollector(pynvml, host, watch_xid=False)
    try:
        for size in args.sizes:
            holders.append(Holder(context, args.device, size))
        time.sleep(1.0)
        poll = collector.poll()
        smi_apps = _nvidia_smi("--query-compute-apps=pid,used_memory")
        smi_card = _nvidia_smi(
            f"--id={args.device}",
            "--query-gpu=memory.total,memory.reserved,memory.used,memory.free",
        )
    finally:
        collector.close()
        for holder in holders:
            holder.release()
    rows = compare({holder.pid: holder.base_mib for holder in holders}, poll, args.device)
    if smi_apps is not None:
        add_smi_figures(rows, smi_apps)
    ok, reason = verdict(rows, args.tolerance_mib)
    card = next(card for card in poll.cards if card.index == args.device)
    figures = ("total", "reserved", "used", "free")
    print(f"\n1. processes: {card.name} (card {card.index}), driver {poll.driver_version}")
    print("   NVML card: " + ", ".join(
        f"{name} {getattr(card, f'{name}_bytes') / MIB:.0f} MiB" for name in figures
    ))  # fmt: skip
    if smi_card:
        values = parse_smi_csv(smi_card)[0]
        print(
            "   nvidia-smi card: "
            + ", ".join(f"{n} {v} MiB" for n, v in zip(figures, values, strict=True))
        )
    print(f"   {'pid':>8} {'allocated':>10} {'NVML used':>10} {'excess':>8} {'nvidia-smi':>11}")
    for row in rows:
        used = "n/a" if row.nvml_used_mib is None else f"{row.nvml_used_mib:.0f}"
        excess = "n/a" if row.excess_mib is None else f"{row.excess_mib:.0f}"
        smi = "n/a" if row.smi_used_mib is None else f"{row.smi_used_mib:.0f}"
        print(f"   {row.pid:>8} {row.allocated_mib:>10} {used:>10} {excess:>8} {smi:>11}")
    print(("   PASS: " if ok else "   FAIL: ") + reason)
    return {
        "ok": ok,
        "reason": reason,
        "card": {name: getattr(card, f"{name}_bytes") for name in figures}
        | {
            "name": card.name,
            "driver": poll.driver_version,
            "compute_mode": card.compute_mode,
            "mig_current": card.mig_current,
            "unsupported": list(card.unsupported),
        },
        "nvidia_smi_card": smi_card,
        "rows": [asdict(row) for row in rows],
        "faults": [asdict(fault) for fault in poll.faults],
        "poll": asdict(poll),
    }


# --- 2. agent -----------------------------------------------------------------------------


def agent_verdict(batches: list[dict], pid: int, base_mib: int, peak_mib: int, tolerance_mib):
    """Did the agent's batches keep the process's peak as a maximum and its base as last?"""
    rows = [
        (batch, row)
        for batch in batches
        for row in batch["processes"]
        if row["pid"] == pid and row["used_bytes_max"] is not None
    ]
    if not rows:
        return False, f"no batch holds process {pid}"
    final_last = rows[-1][1]["used_bytes_last"] / MIB
    overhead = final_last - base_mib
    peak_batch, peak_row = max(rows, key=lambda pair: pair[1]["used_bytes_max"])
    peak_seen = peak_row["used_bytes_max"] / MIB
    expected = base_mib + peak_mib + overhead
    if abs(peak_seen - expected) > tolerance_mib:
        return False, (
            f"batch {peak_batch['seq']} kept a maximum of {peak_seen:.0f} MiB; "
            f"the peak was {expected:.0f} MiB (base {base_mib} + peak {peak_mib} + context "
            f"{overhead:.0f})"
        )
    if abs(peak_row["used_bytes_last"] / MIB - final_last) > tolerance_mib:
        return False, (
            f"batch {peak_batch['seq']} ended on {peak_row['used_bytes_last'] / MIB:.0f} MiB, "
            f"not the base {final_last:.0f} MiB: the peak did not fall inside one interval"
        )
    return True, (
        f"batch {peak_batch['seq']} kept the {peak_seen:.0f} MiB peak as its maximum and "
        f"{final_last:.0f} MiB as its last value ({peak_row['samples']} polls)"
    )


def check_agent(pynvml, context, args, host: str) -> dict[str, Any]:
    from inventory.agent.runtime import HostRuntime
    from inventory.agent.sources import NvmlSource

    base_mib, peak_mib = args.agent_base_mib, args.agent_peak_mib
    batches: list[dict] = []
    holder = Holder(context, args.device, base_mib, peak_mib)
    runtime = HostRuntime(host, NvmlSource(pynvml, time.time), batches.append)
    plan = {"sample_interval_s": 0.25, "flush_interval_s": args.agent_seconds / 2.5,
            "scrape_interval_s": 3600.0, "deployments": []}  # fmt: skip
    runtime.apply_plan(plan)
    started, phase = time.time(), "before"
    try:
        while (elapsed := time.time() - started) < args.agent_seconds:
            if phase == "before" and elapsed >= PEAK_WINDOW_S[0]:
                holder.peak(True)
                phase = "peak"
            elif phase == "peak" and elapsed >= PEAK_WINDOW_S[1]:
                holder.peak(False)
                phase = "after"
            runtime.tick()
            runtime.publish_pending()
            time.sleep(max(0.0, runtime.next_poll - time.time()))
        runtime.flush(time.time())
        runtime.publish_pending()
    finally:
        runtime.collector.close()
        holder.release()
    ok, reason = agent_verdict(batches, holder.pid, base_mib, peak_mib, args.tolerance_mib)
    print(f"\n2. agent: base {base_mib} MiB, peak +{peak_mib} MiB from {PEAK_WINDOW_S[0]:.0f} "
          f"to {PEAK_WINDOW_S[1]:.0f} s, polls every {plan['sample_interval_s']} s, "
          f"flush every {plan['flush_interval_s']:.1f} s")  # fmt: skip
    _print_batches(batches, holder.pid, args.device)
    print(("   PASS: " if ok else "   FAIL: ") + reason)
    if args.batches:
        Path(args.batches).write_text(json.dumps(batches, indent=1))
    return {"ok": ok, "reason": reason, "pid": holder.pid, "batches": len(batches)}


def _print_batches(batches: list[dict], pid: int, device: int) -> None:
    print(f"   {'batch':>5} {'polls':>5} {'seconds':>8} {'max MiB':>8} {'last MiB':>9}"
          f" {'card max MiB':>13} {'deployment':>10} {'faults':>6}")  # fmt: skip
    for batch in batches:
        row = next((r for r in batch["processes"] if r["pid"] == pid), None)
        peak = "-" if row is None else f"{row['used_bytes_max'] / MIB:.0f}"
        last = "-" if row is None else f"{row['used_bytes_last'] / MIB:.0f}"
        deployment = (row or {}).get("deployment_id") or "-"
        card = next((c for c in batch["cards"] if c["index"] == device), {})
        card_max = card.get("used_bytes_max")
        card_max = "-" if card_max is None else f"{card_max / MIB:.0f}"
        seconds = batch["interval_end"] - batch["interval_start"]
        print(f"   {batch['seq']:>5} {batch['polls']:>5} {seconds:>8.1f} {peak:>8} {last:>9}"
              f" {card_max:>13} {deployment:>10} {len(batch['faults']):>6}")  # fmt: skip
    faults = {(f["call"], f["error"]): f["message"] for b in batches for f in b["faults"]}
    for (call, error), message in faults.items():
        print(f"   fault: {call} {error}: {message}")


# --- 3. the agent process ------------------------------------------------------------------

AGENT_DEPLOYMENT = "gpu-check"
REPOSITORY = Path(__file__).resolve().parents[2]
# What a GPU host does not have: the agent must run without them.
CENTRAL_ONLY = {"CELERY_BROKER_URL", "DATABASE_URL", "DJANGO_SETTINGS_MODULE"}


def folder_broker_messages(queue: Path) -> list[tuple[bytes, dict]]:
    """The bodies and headers of the batches waiting in a folder broker's queue, oldest first."""
    messages = []
    for path in sorted(queue.glob("*.ingest.msg"), key=lambda p: int(p.name.split("_")[0])):
        envelope = json.loads(path.read_text())
        body = envelope["body"]
        if envelope["properties"].get("body_encoding") == "base64":
            body = base64.b64decode(body)
        messages.append((body.encode() if isinstance(body, str) else body, envelope["headers"]))
    return messages


def folder_broker_batches(queue: Path) -> list[dict]:
    return [json.loads(body) for body, _ in folder_broker_messages(queue)]


def check_agent_process(pynvml, context, args, host: str) -> dict[str, Any]:
    """The agent as deployed: a Celery worker on the host's queue, sent a collection plan,
    publishing to a folder broker. It must start without Django or a database."""
    from celery import Celery
    from kombu import Connection

    from inventory.telemetry.collector import NvmlCollector

    broker = Path(tempfile.mkdtemp(prefix="gpu-check-broker-"))
    queue = broker / "queue"
    for folder in (queue, broker / "control"):
        folder.mkdir()
    env = {name: value for name, value in os.environ.items() if name not in CENTRAL_ONLY}
    secret = secrets.token_urlsafe(32)  # what register_host would have issued
    (broker / "agent-secret").write_text(secret)
    env |= {"CELERY_FILESYSTEM_BROKER_DIR": str(broker), "AGENT_SOURCE": "nvml",
            "AGENT_HOST": host, "AGENT_SECRET_FILE": str(broker / "agent-secret")}  # fmt: skip
    collector = NvmlCollector(pynvml, host, watch_xid=False)
    card_uuid = next(c.uuid for c in collector.poll().cards if c.index == args.device)
    collector.close()
    base_mib, peak_mib = args.agent_base_mib, args.agent_peak_mib
    holder = Holder(context, args.device, base_mib, peak_mib)
    log = broker / "agent-worker.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "inventory.agent.app", "worker",
         "-Q", f"host.{host}", "--pool", "threads", "-c", "1", "-l", "info"],
        env=env, cwd=REPOSITORY, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    sender = Celery("gpu-check", broker="filesystem://", fixups=[])
    sender.conf.broker_transport_options = {
        "data_folder_in": str(queue), "data_folder_out": str(queue),
        "control_folder": str(broker / "control"), "store_processed": False,
    }  # fmt: skip
    plan = {"host": host, "collector": "nvml", "sample_interval_s": 0.5, "flush_interval_s": 4.0,
            "scrape_interval_s": 3600.0, "issued_at": time.time(),
            "deployments": [{"deployment_id": AGENT_DEPLOYMENT, "device_uuids": [card_uuid],
                             "process_name_pattern": "python"}]}  # fmt: skip
    try:
        # Through this broker's connection: Celery prefers CELERY_BROKER_URL to any it is given.
        with Connection(
            "filesystem://", transport_options=sender.conf.broker_transport_options
        ) as c:
            sender.send_task("agent.apply_plan", args=[plan], queue=f"host.{host}", connection=c)
        deadline = time.monotonic() + 90
        while not any(queue.glob("*.ingest.msg")):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the agent published nothing:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        holder.peak(True)
        time.sleep(2.0)
        holder.peak(False)
        time.sleep(10.0)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
        holder.release()
    messages = folder_broker_messages(queue)
    batches = [json.loads(body) for body, _ in messages]
    ok, reason = agent_verdict(batches, holder.pid, base_mib, peak_mib, args.tolerance_mib)
    mapped = {r["deployment_id"] for b in batches for r in b["processes"] if r["pid"] == holder.pid}
    if ok and mapped != {AGENT_DEPLOYMENT}:
        ok, reason = False, f"the process mapped to {sorted(map(str, mapped))}, not the plan's"
    forged = [h for body, h in messages if not signing.verify(secret, body, h.get(signing.HEADER))]
    if ok and forged:
        ok, reason = False, f"{len(forged)} of {len(messages)} batches not signed with its secret"
    print(f"\n3. agent process: a Celery worker on host.{host}, plan sent through a folder "
          f"broker, polls every 0.5 s, flush every 4 s; peak +{peak_mib} MiB for 2 s")  # fmt: skip
    _print_batches(batches, holder.pid, args.device)
    print(("   PASS: " if ok else "   FAIL: ") + reason)
    if args.broker_archive:
        with tarfile.open(args.broker_archive, "w:gz") as archive:
            archive.add(queue, arcname="queue")
            archive.add(log, arcname="agent-worker.log")
    return {"ok": ok, "reason": reason, "pid": holder.pid, "batches": len(batches)}


# --- 4. MPS -------------------------------------------------------------------------------


def mps_verdict(processes: list[dict], client_pid: int) -> tuple[bool, str]:
    """An MPS client must be one process of kind "mps": listed twice, it is counted twice."""
    client = [process for process in processes if process["pid"] == client_pid]
    if not client:
        return False, "NVML did not list the client"
    if len(client) > 1:
        return False, f"the client is recorded {len(client)} times: its memory counts twice"
    if client[0]["kind"] != "mps":
        return False, f"the client is recorded as a {client[0]['kind']} process, not an MPS one"
    return True, f"the client is one MPS process of {client[0]['used_mib']:.0f} MiB"


def check_mps(pynvml, context, args, host: str) -> dict[str, Any]:
    from inventory.agent.gpu_check_signals import private_mps_daemon
    from inventory.telemetry.collector import NvmlCollector

    started = private_mps_daemon("4. mps", "gpu-check-mps-")
    if started is None:
        return {"ok": None, "reason": "nvidia-cuda-mps-control not installed"}
    control, env, daemon_env = started
    holder, poll, error = None, None, None
    try:
        holder = Holder(context, args.device, args.sizes[0], env=env)
        time.sleep(1.0)
        collector = NvmlCollector(pynvml, host, watch_xid=False)
        poll = collector.poll()
        collector.close()
    except RuntimeError as exc:
        error = str(exc)
    finally:
        if holder is not None:
            holder.release()
        with contextlib.suppress(subprocess.SubprocessError):
            subprocess.run([control], input="quit\n", text=True, env=daemon_env, timeout=30)
    logs = {
        path.name: path.read_text(errors="replace")[-2000:]
        for path in sorted(Path(env["CUDA_MPS_LOG_DIRECTORY"]).glob("*.log"))
    }
    print(f"\n4. mps: client of {args.sizes[0]} MiB under an MPS control daemon")
    if poll is None:
        print(f"   FAIL: {error}")
        for name, text in logs.items():
            print(f"   {name}: {text.strip().splitlines()[-3:]}")
        return {"ok": False, "reason": error, "logs": logs}
    card = next(card for card in poll.cards if card.index == args.device)
    seen = [
        {
            "pid": p.pid,
            "kind": p.kind,
            "name": p.name,
            "used_mib": None if p.used_bytes is None else p.used_bytes / MIB,
        }
        for p in card.processes
    ]
    for process in seen:
        used = "n/a" if process["used_mib"] is None else f"{process['used_mib']:.0f} MiB"
        client = " (the client)" if process["pid"] == holder.pid else ""
        print(f"   {process['kind']:>7} process: pid {process['pid']} {process['name']}: {used}"
              f"{client}")  # fmt: skip
    ok, reason = mps_verdict(seen, holder.pid)
    print(("   PASS: " if ok else "   FAIL: ") + reason)
    return {"ok": ok, "reason": reason, "client_pid": holder.pid, "processes": seen,
            "faults": [asdict(f) for f in poll.faults], "logs": logs}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", default="1024,2048,3072")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--tolerance-mib", type=float, default=64.0)
    parser.add_argument("--agent-seconds", type=float, default=10.0, help="0 skips the check")
    parser.add_argument("--agent-base-mib", type=int, default=1024)
    parser.add_argument("--agent-peak-mib", type=int, default=4096)
    parser.add_argument(
        "--agent-process", action="store_true", help="also run the agent as a Celery worker"
    )
    parser.add_argument("--broker-archive", help="pack that agent's messages into this .tar.gz")
    parser.add_argument("--mps", action="store_true", help="also run the MPS check")
    parser.add_argument(
        "--signals", action="store_true", help="also the OOM, MPS-kill and exporter checks"
    )
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--batches", help="write the agent's batches to this file")
    args = parser.parse_args(argv)
    args.sizes = [int(size) for size in args.sizes_mib.split(",")]

    from inventory.agent import gpu_check_signals

    unavailable = gpu_check_signals.gpu_unavailable()
    if unavailable is not None:
        print(f"No GPU check can run here: {unavailable}. Every check skipped.")
        if args.json:
            Path(args.json).write_text(json.dumps({"gpu": {"ok": None, "reason": unavailable}}))
        return 0
    import pynvml

    host = os.uname().nodename
    context = multiprocessing.get_context("spawn")
    checks = {"processes": check_processes}
    if args.agent_seconds > 0:
        checks["agent"] = check_agent
    if args.agent_process:
        checks["agent_process"] = check_agent_process
    if args.mps:
        checks["mps"] = check_mps
    if args.signals:
        checks.update(gpu_check_signals.CHECKS)
        args.holder = Holder
    report: dict[str, Any] = {}
    for name, check in checks.items():
        try:
            report[name] = check(pynvml, context, args, host)
        except Exception as exc:  # one check failing must not cost the others' figures
            traceback.print_exc()
            report[name] = {"ok": False, "reason": f"{type(exc).__name__}: {exc}"}
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    return 0 if all(part["ok"] is not False for part in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
