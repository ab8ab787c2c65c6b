"""A PyTorch-like caching allocator, reduced to the quantities the console reads.

- Load time allocates weights, workspace and the KV reservation (`static_bytes`) once.
- KV demand above the reservation ("spill") is allocated on the fly. Freed spill stays
  *reserved*: the caching allocator keeps segments for reuse and never gives them back to the
  driver, so NVML's per-process figure sits at the spill's high-water mark until a reload.
- Allocation churn leaves inactive split blocks that grow with activity over hours, and the
  largest free block shrinks as the cache fragments: the "nvidia-smi green, framework red" case.
A restart (reload) starts a fresh allocator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_MIB = 1024 * 1024
# Split bytes added per hour of full activity; calibrated so a busy day leaves ~1-2 GiB split.
_SPLIT_BYTES_PER_BUSY_HOUR = 96 * _MIB
_SPLIT_CAP_FRACTION = 0.04  # of static + spill reservation
_LARGEST_BLOCK_HALF_LIFE_H = 6.0  # the largest cached free block halves every 6 h of uptime
# Churn splits the free blocks ever finer: after this many hours of full activity the largest
# free block is half of what it was. A fresh (reloaded) process starts unfragmented.
_SPLIT_BLOCK_HALF_LIFE_BUSY_H = 24.0
_SMALL_BLOCK = 20 * _MIB  # large-pool segment granularity: a split leaves at most this whole
# Engines empty the cache now and then (TGI after batches, vLLM on sleep/idle): cached spill
# goes back to the driver with this time constant, not at once.
_CACHED_RELEASE_TAU_S = 1800.0


@dataclass(slots=True)
class CachingAllocator:
    static_bytes: int
    spill_bytes: int = 0
    spill_reserved_bytes: int = 0
    inactive_split_bytes: float = 0.0
    uptime_s: float = 0.0
    busy_s: float = 0.0
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    num_ooms: int = 0
    num_alloc_retries: int = 0

    @property
    def allocated_bytes(self) -> int:
        return self.static_bytes + self.spill_bytes

    @property
    def reserved_bytes(self) -> int:
        return self.static_bytes + self.spill_reserved_bytes + int(self.inactive_split_bytes)

    def growth_needed(self, target_spill: int) -> int:
        """New bytes this process must get from the driver to hold `target_spill`."""
        return max(0, target_spill - self.spill_reserved_bytes)

    def set_spill(self, target_spill: int) -> None:
        """Allocate or free spill; the caller has checked that any growth fits on the card."""
        self.spill_bytes = target_spill
        if target_spill > self.spill_reserved_bytes:
            self.spill_reserved_bytes = target_spill
        allocated, reserved = self.allocated_bytes, self.reserved_bytes
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, allocated)
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, reserved)

    def drift(self, dt: float, activity: float, headroom_bytes: int) -> None:
        """Age the cache: busy hours fragment it; idle cached spill slowly goes back.

        Split blocks come out of new segments, so they only grow while the card has room.
        """
        self.uptime_s += dt
        self.busy_s += activity * dt
        cap = _SPLIT_CAP_FRACTION * (self.static_bytes + self.spill_reserved_bytes)
        if self.inactive_split_bytes < cap and headroom_bytes > 0:
            growth = _SPLIT_BYTES_PER_BUSY_HOUR * activity * dt / 3600.0
            self.inactive_split_bytes = min(
                cap, self.inactive_split_bytes + min(growth, headroom_bytes)
            )
        cached = self.spill_reserved_bytes - self.spill_bytes
        if cached > 0:
            released = int(cached * (1.0 - math.exp(-dt / _CACHED_RELEASE_TAU_S)))
            self.spill_reserved_bytes -= released

    @property
    def largest_free_block_bytes(self) -> int:
        cached_spill = self.spill_reserved_bytes - self.spill_bytes
        decay = 0.5 ** (self.uptime_s / 3600.0 / _LARGEST_BLOCK_HALF_LIFE_H)
        split_quality = 0.5 ** (self.busy_s / 3600.0 / _SPLIT_BLOCK_HALF_LIFE_BUSY_H)
        split_block = max(self.inactive_split_bytes * split_quality,
                          min(self.inactive_split_bytes, _SMALL_BLOCK))  # fmt: skip
        return int(max(cached_spill * decay, split_block))

    def memory_stats(self) -> dict[str, int]:
        """A subset of torch.cuda.memory_stats(), same keys."""
        allocated, reserved = self.allocated_bytes, self.reserved_bytes
        return {
            "allocated_bytes.all.current": allocated,
            "allocated_bytes.all.peak": self.peak_allocated_bytes,
            "active_bytes.all.current": allocated,
            "reserved_bytes.all.current": reserved,
            "reserved_bytes.all.peak": max(self.peak_reserved_bytes, reserved),
            "inactive_split_bytes.all.current": int(self.inactive_split_bytes),
            "num_alloc_retries": self.num_alloc_retries,
            "num_ooms": self.num_ooms,
        }
