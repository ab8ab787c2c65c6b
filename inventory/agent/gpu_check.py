"""Check the real NVML path on a machine with an NVIDIA GPU.

    python -m inventory.agent.gpu_check [--sizes-mib 1024,2048,3072] [--device 0] [--json OUT]

Starts one process per size that allocates exactly that much device memory with the CUDA
driver API (cuMemAlloc through ctypes: no PyTorch needed), then polls the card with the
console's own NvmlCollector over pynvml, the code path the host agent runs, and prints what
NVML reported for each process next to what it allocated. NVML's figure is larger by the
process's CUDA context (a few hundred MiB); the check passes when every process is found and
its excess over the allocation is the same for all of them within --tolerance-mib.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing
import os
import sys
import time
from dataclasses import asdict, dataclass

MIB = 1024 * 1024


def _hold_allocation(device: int, size_mib: int, ready, release) -> None:
    """Child process: allocate `size_mib` on `device` and hold it until told to let go."""
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(result: int, call: str) -> None:
        if result != 0:
            raise RuntimeError(f"{call} failed with CUDA error {result}")

    check(cuda.cuInit(0), "cuInit")
    handle = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(handle), device), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, handle), "cuCtxCreate")
    pointer = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size_mib * MIB)), "cuMemAlloc")
    # Touch the memory so no driver could defer the allocation.
    check(cuda.cuMemsetD8_v2(pointer, 0xAB, ctypes.c_size_t(size_mib * MIB)), "cuMemsetD8")
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    ready.set()
    release.wait(300)
    cuda.cuMemFree_v2(pointer)


@dataclass
class Row:
    pid: int
    allocated_mib: int
    nvml_used_mib: float | None
    excess_mib: float | None


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


def verdict(rows: list[Row], tolerance_mib: float) -> tuple[bool, str]:
    missing = [row.pid for row in rows if row.nvml_used_mib is None]
    if missing:
        return False, f"NVML did not report processes {missing} (containers hide host PIDs)"
    excess = [row.excess_mib for row in rows]
    spread = max(excess) - min(excess)
    if min(excess) < 0:
        return False, "NVML reported less than a process allocated"
    if spread > tolerance_mib:
        return False, f"context overhead differs by {spread:.0f} MiB between processes"
    return True, f"every process found; context overhead {min(excess):.0f}-{max(excess):.0f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", default="1024,2048,3072")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--tolerance-mib", type=float, default=64.0)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes_mib.split(",")]

    import pynvml

    from inventory.telemetry.collector import NvmlCollector

    context = multiprocessing.get_context("spawn")
    release = context.Event()
    children, allocations = [], {}
    for size in sizes:
        ready = context.Event()
        child = context.Process(target=_hold_allocation, args=(args.device, size, ready, release))
        child.start()
        if not ready.wait(120):
            raise SystemExit(f"the {size} MiB allocation did not complete")
        children.append(child)
        allocations[child.pid] = size
    collector = NvmlCollector(pynvml, os.uname().nodename, watch_xid=False)
    try:
        time.sleep(1.0)
        poll = collector.poll()
        rows = compare(allocations, poll, args.device)
    finally:
        collector.close()
        release.set()
        for child in children:
            child.join(30)
    ok, reason = verdict(rows, args.tolerance_mib)
    card = next(card for card in poll.cards if card.index == args.device)
    print(f"{card.name} (card {card.index}), driver {poll.driver_version}")
    figures = ("total", "reserved", "used", "free")
    print("card: " + ", ".join(
        f"{name} {getattr(card, f'{name}_bytes') / MIB:.0f} MiB" for name in figures
    ))  # fmt: skip
    print(f"{'pid':>8} {'allocated MiB':>14} {'NVML used MiB':>14} {'excess MiB':>11}")
    for row in rows:
        used = "n/a" if row.nvml_used_mib is None else f"{row.nvml_used_mib:.0f}"
        excess = "n/a" if row.excess_mib is None else f"{row.excess_mib:.0f}"
        print(f"{row.pid:>8} {row.allocated_mib:>14} {used:>14} {excess:>11}")
    print(("PASS: " if ok else "FAIL: ") + reason)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"ok": ok, "reason": reason, "rows": [asdict(r) for r in rows],
                       "faults": [asdict(f) for f in poll.faults]}, handle, indent=2)  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
