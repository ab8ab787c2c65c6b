"""What one observation of a card holds: the inputs the ledger, fragmentation and OOM triage read.

Every source is optional because real collection is partial: NVML may not report per-process
memory (``usedGpuMemory`` is ``None`` in containers), an engine may expose no allocator
statistics, a deployment may have no spec. ``None`` always means "not known", never zero.
Times are epoch seconds, memory is bytes (see :mod:`inventory.analytics.units`).
"""

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Basis(StrEnum):
    """How a figure was obtained: read from a live source, or derived from specs/models."""

    MEASURED = "measured"
    ESTIMATED = "estimated"


def _require_non_negative(owner: object, **values: float | None) -> None:
    for name, value in values.items():
        if value is not None and value < 0:
            raise ValueError(f"{type(owner).__name__}.{name} must be >= 0, got {value}")


def process_label(deployment: str | None, pid: int | None) -> str:
    """How explanations name a process: ``chat pid 4242``, ``pid 4242`` or ``pid ?``."""
    pid_text = "pid ?" if pid is None else f"pid {pid}"
    return pid_text if deployment is None else f"{deployment} {pid_text}"


@dataclass(frozen=True)
class AllocatorStats:
    """A process's caching-allocator statistics (PyTorch ``torch.cuda.memory_stats`` names).

    ``inactive_split_bytes`` and ``largest_free_block_bytes`` both describe free memory inside
    the reserved pool, so neither can exceed ``reserved - allocated``.
    """

    reserved_bytes: int
    allocated_bytes: int
    inactive_split_bytes: int | None = None
    largest_free_block_bytes: int | None = None

    def __post_init__(self) -> None:
        _require_non_negative(
            self,
            reserved_bytes=self.reserved_bytes,
            allocated_bytes=self.allocated_bytes,
            inactive_split_bytes=self.inactive_split_bytes,
            largest_free_block_bytes=self.largest_free_block_bytes,
        )
        if self.allocated_bytes > self.reserved_bytes:
            raise ValueError("allocated_bytes cannot exceed reserved_bytes")
        for name in ("inactive_split_bytes", "largest_free_block_bytes"):
            value = getattr(self, name)
            if value is not None and value > self.pool_free_bytes:
                raise ValueError(f"{name} cannot exceed reserved_bytes - allocated_bytes")

    @property
    def pool_free_bytes(self) -> int:
        """Reserved but not allocated: free to this process, invisible to every other one."""
        return self.reserved_bytes - self.allocated_bytes


def read_allocator_stats(
    reserved: int | None,
    allocated: int | None,
    inactive_split: int | None,
    largest_free_block: int | None,
) -> AllocatorStats | None:
    """Allocator statistics as a process reported them; None when reserved or allocated is
    unknown or the figures contradict themselves (a negative, allocated above reserved).

    The free-block figures are read at slightly different instants from the pool's totals, so
    one above the pool's free bytes is taken as all of them rather than thrown away.
    """
    known = [v for v in (reserved, allocated, inactive_split, largest_free_block) if v is not None]
    if reserved is None or allocated is None or allocated > reserved or min(known) < 0:
        return None
    pool_free = reserved - allocated
    return AllocatorStats(
        reserved,
        allocated,
        None if inactive_split is None else min(inactive_split, pool_free),
        None if largest_free_block is None else min(largest_free_block, pool_free),
    )


def allocator_from_batch(raw: dict | None) -> AllocatorStats | None:
    """From the ``allocator`` object of a telemetry batch's process (and an OOM's snapshot)."""
    raw = raw or {}
    return read_allocator_stats(
        raw.get("reserved_bytes"),
        raw.get("allocated_bytes"),
        raw.get("inactive_split_bytes"),
        raw.get("largest_free_block_bytes"),
    )


@dataclass(frozen=True)
class EngineKvCache:
    """The engine's KV pool and how full it is.

    ``usage_fraction`` is in ``[0, 1]``: vLLM's ``kv_cache_usage_perc`` (formerly
    ``gpu_cache_usage_perc``) is a fraction despite its name. ``pool_basis`` says whether the
    pool size was read from the engine (cache config) or estimated (e.g. from
    ``gpu_memory_utilization``); see :mod:`inventory.analytics.kv` for both helpers.
    """

    pool_bytes: int
    usage_fraction: float | None
    pool_basis: Basis = Basis.MEASURED
    pool_source: str = "engine cache_config"

    def __post_init__(self) -> None:
        _require_non_negative(self, pool_bytes=self.pool_bytes)
        if self.usage_fraction is not None and not 0 <= self.usage_fraction <= 1:
            raise ValueError(f"usage_fraction must be in [0, 1], got {self.usage_fraction}")


@dataclass(frozen=True)
class DeploymentSpec:
    """What a deployment's process on this card is expected to hold (its per-card share).

    Every field is an estimate from the deployment's declared configuration; ``None`` means
    the spec does not say.
    """

    weights_bytes: int | None = None
    kv_reservation_bytes: int | None = None
    workspace_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    nccl_bytes: int | None = None
    # The process's CUDA context here, an estimate per card type (inventory.analytics.context).
    cuda_context_bytes: int | None = None

    def __post_init__(self) -> None:
        _require_non_negative(
            self,
            cuda_context_bytes=self.cuda_context_bytes,
            weights_bytes=self.weights_bytes,
            kv_reservation_bytes=self.kv_reservation_bytes,
            workspace_bytes=self.workspace_bytes,
            cuda_graph_bytes=self.cuda_graph_bytes,
            nccl_bytes=self.nccl_bytes,
        )


@dataclass(frozen=True)
class ProcessSnapshot:
    """One process on the card; ``used_bytes`` is NVML's per-process ``usedGpuMemory``."""

    pid: int | None
    deployment: str | None
    used_bytes: int | None = None
    allocator: AllocatorStats | None = None
    kv_cache: EngineKvCache | None = None
    spec: DeploymentSpec | None = None

    def __post_init__(self) -> None:
        _require_non_negative(self, used_bytes=self.used_bytes)

    @property
    def label(self) -> str:
        return process_label(self.deployment, self.pid)


@dataclass(frozen=True)
class CardSnapshot:
    """One card at one moment.

    ``total_bytes`` is always known (from NVML or the device catalogue). The other card figures
    follow NVML memory v2, ``total = driver_reserved + used + free``, and may each be missing.
    """

    card_id: str
    at: float
    total_bytes: int
    driver_reserved_bytes: int | None = None
    used_bytes: int | None = None
    free_bytes: int | None = None
    processes: tuple[ProcessSnapshot, ...] = ()

    def __post_init__(self) -> None:
        _require_non_negative(
            self,
            total_bytes=self.total_bytes,
            driver_reserved_bytes=self.driver_reserved_bytes,
            used_bytes=self.used_bytes,
            free_bytes=self.free_bytes,
        )


def snapshot_at(snapshots: Sequence[CardSnapshot], at: float) -> CardSnapshot:
    """The latest snapshot taken at or before ``at``: the card "as it was" at a past moment."""
    ordered = sorted(snapshots, key=lambda s: s.at)
    index = bisect_right([s.at for s in ordered], at)
    if index == 0:
        raise LookupError(f"no snapshot at or before {at}")
    return ordered[index - 1]
