"""The per-card memory ledger: where every byte of one card is, from whatever sources exist.

The ledger is a tree of figures, each fitted inside its parent, and its leaves are the lines::

    card total
    ├── driver reserved                       NVML reserved (memory v2)
    ├── used                                  NVML used
    │   ├── process footprint (per process)   NVML per-process used
    │   │   ├── allocator pool                allocator reserved_bytes
    │   │   │   ├── fragmentation             inactive_split_bytes
    │   │   │   ├── allocator reserve         reserved - allocated - inactive split
    │   │   │   └── allocated                 allocated_bytes
    │   │   │       ├── KV cache              engine pool, split into used / reserved-unused
    │   │   │       ├── model weights         deployment spec
    │   │   │       ├── CUDA graph pools      deployment spec
    │   │   │       └── (remainder) workspace/activations
    │   │   ├── communication buffers (NCCL)  deployment spec (NCCL allocates outside PyTorch)
    │   │   └── (remainder) CUDA context      context, library workspaces: NVML used - pool - NCCL
    │   └── (remainder) unattributed          used that no process accounts for
    └── (remainder) free

Without allocator statistics a process's footprint holds the engine/spec components directly
(weights, KV cache, CUDA graphs, NCCL, CUDA context, workspace) and the rest is unattributed.
The CUDA context is real memory NVML counts (518 MiB a process measured on an H200, see
``inventory.analytics.context``): it is a line of its own, never folded into "free".

Reconciliation, so that the lines always sum to the card total exactly, in integer bytes:

- A parent is the truth for its children. Measured children are placed first; if they alone
  overflow the parent (figures read at slightly different instants) they are scaled down
  together by the largest-remainder method. Estimated children then fill what is left in a
  fixed order (weights, KV, CUDA graphs, NCCL, CUDA context, workspace), each clipped to
  the room left. Every cut is written to ``CardLedger.notes``.
- A missing parent is estimated from its children: a process without NVML used memory gets
  its allocator pool plus NCCL, or the sum of its components; a card without NVML used gets
  the sum of its process footprints. A missing driver reserve is derived from total - used -
  free when both are known, else taken as 0 (estimated).
- Remainders (free, unattributed, workspace) are ``measured`` only when their parent and every
  sibling are measured; one estimate in the subtraction makes them ``estimated``.
- NVML's own free figure is not a line: free is total - driver reserved - used, and a
  disagreement (nvidia-smi rounds each figure to MiB) is noted.

Memory is accounted per card and per process; a ledger never spans cards.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from inventory.analytics.snapshot import (
    AllocatorStats,
    Basis,
    CardSnapshot,
    DeploymentSpec,
    ProcessSnapshot,
)


class LineKind(StrEnum):
    MODEL_WEIGHTS = "model_weights"
    WORKSPACE = "workspace_activations"
    CUDA_GRAPHS = "cuda_graph_pools"
    COMMUNICATION = "communication_buffers"
    CUDA_CONTEXT = "cuda_context"
    KV_CACHE_USED = "kv_cache_used"
    KV_CACHE_UNUSED = "kv_cache_reserved_unused"
    # The engine's pool when its fill level is not known: shown whole rather than guessed.
    KV_CACHE_USE_UNKNOWN = "kv_cache_use_unknown"
    ALLOCATOR_RESERVE = "allocator_reserve"
    FRAGMENTATION = "fragmentation"
    DRIVER_RESERVED = "driver_reserved"
    FREE = "free"
    UNATTRIBUTED = "unattributed"


@dataclass(frozen=True)
class LedgerLine:
    kind: LineKind
    bytes: int
    basis: Basis
    source: str
    deployment: str | None = None
    pid: int | None = None


@dataclass(frozen=True)
class CardLedger:
    card_id: str
    at: float
    total_bytes: int
    lines: tuple[LedgerLine, ...]
    notes: tuple[str, ...]

    def bytes_of(self, kind: LineKind) -> int:
        return sum(line.bytes for line in self.lines if line.kind is kind)

    def lines_for(self, deployment: str) -> tuple[LedgerLine, ...]:
        return tuple(line for line in self.lines if line.deployment == deployment)

    @property
    def free_bytes(self) -> int:
        return self.bytes_of(LineKind.FREE)


@dataclass(frozen=True)
class _Claim:
    """A figure competing for room inside its parent; ``kind`` is ``None`` for inner nodes."""

    name: str
    bytes: int
    basis: Basis
    source: str
    kind: LineKind | None = None


def _scale_down(amounts: Sequence[int], target: int) -> list[int]:
    """Scale integers to sum to ``target`` (< their sum), largest remainders rounded up."""
    total = sum(amounts)
    quotas = [amount * target // total for amount in amounts]
    remainders = [amount * target % total for amount in amounts]
    shortfall = target - sum(quotas)
    for index in sorted(range(len(amounts)), key=lambda i: -remainders[i])[:shortfall]:
        quotas[index] += 1
    return quotas


def _fit(capacity: int, claims: Sequence[_Claim], where: str, notes: list[str]) -> list[_Claim]:
    measured_total = sum(claim.bytes for claim in claims if claim.basis is Basis.MEASURED)
    if measured_total > capacity:
        scaled = iter(_scale_down([c.bytes for c in claims if c.basis is Basis.MEASURED], capacity))
        fitted = [next(scaled) if c.basis is Basis.MEASURED else 0 for c in claims]
    else:
        room = capacity - measured_total
        fitted = []
        for claim in claims:
            if claim.basis is Basis.MEASURED:
                fitted.append(claim.bytes)
            else:
                fitted.append(min(claim.bytes, room))
                room -= fitted[-1]
    for claim, size in zip(claims, fitted, strict=True):
        if size != claim.bytes:
            notes.append(
                f"{where}: {claim.name} ({claim.basis}, {claim.source}) cut from "
                f"{claim.bytes:,} B to {size:,} B to fit {capacity:,} B"
            )
    return [replace(claim, bytes=size) for claim, size in zip(claims, fitted, strict=True)]


def _remainder_basis(parent: Basis, siblings: Sequence[_Claim]) -> Basis:
    exact = parent is Basis.MEASURED and all(
        s.basis is Basis.MEASURED for s in siblings if s.bytes > 0
    )
    return Basis.MEASURED if exact else Basis.ESTIMATED


def _card_claims(snapshot: CardSnapshot, notes: list[str]) -> tuple[_Claim, _Claim | None]:
    total = snapshot.total_bytes
    reserved, used, free = snapshot.driver_reserved_bytes, snapshot.used_bytes, snapshot.free_bytes
    if reserved is not None:
        driver = _Claim("driver reserved", reserved, Basis.MEASURED, "nvml reserved")
    elif used is not None and free is not None:
        derived = total - used - free
        if derived < 0:
            notes.append(f"card {snapshot.card_id}: nvml used + free exceed total by {-derived:,}")
        driver = _Claim(
            "driver reserved", max(derived, 0), Basis.MEASURED, "nvml total - used - free"
        )
    else:
        driver = _Claim("driver reserved", 0, Basis.ESTIMATED, "not reported, taken as 0")
    if used is not None:
        return driver, _Claim("used", used, Basis.MEASURED, "nvml used")
    if free is not None and driver.basis is Basis.MEASURED:
        derived_used = max(total - driver.bytes - free, 0)
        return driver, _Claim("used", derived_used, Basis.MEASURED, "nvml total - reserved - free")
    return driver, None


def _spec_claims(spec: DeploymentSpec, *kinds: LineKind) -> list[_Claim]:
    fields = {
        LineKind.MODEL_WEIGHTS: spec.weights_bytes,
        LineKind.CUDA_GRAPHS: spec.cuda_graph_bytes,
        LineKind.COMMUNICATION: spec.nccl_bytes,
        LineKind.CUDA_CONTEXT: spec.cuda_context_bytes,
        LineKind.WORKSPACE: spec.workspace_bytes,
    }
    return [
        _Claim(str(kind), fields[kind], Basis.ESTIMATED, "deployment spec", kind)
        for kind in kinds
        if fields[kind] is not None
    ]


def _kv_claims(process: ProcessSnapshot, spec: DeploymentSpec) -> list[_Claim]:
    kind = LineKind.KV_CACHE_USE_UNKNOWN
    if process.kv_cache is not None:
        cache = process.kv_cache
        return [_Claim("KV pool", cache.pool_bytes, cache.pool_basis, cache.pool_source, kind)]
    if spec.kv_reservation_bytes is not None:
        return [
            _Claim("KV pool", spec.kv_reservation_bytes, Basis.ESTIMATED, "deployment spec", kind)
        ]
    return []


def _components(process: ProcessSnapshot, spec: DeploymentSpec) -> list[_Claim]:
    """A process's components when no allocator statistics split its footprint."""
    return [
        *_spec_claims(spec, LineKind.MODEL_WEIGHTS),
        *_kv_claims(process, spec),
        *_spec_claims(
            spec,
            LineKind.CUDA_GRAPHS,
            LineKind.COMMUNICATION,
            LineKind.CUDA_CONTEXT,
            LineKind.WORKSPACE,
        ),
    ]


def _footprint(process: ProcessSnapshot) -> _Claim:
    name = f"{process.label} footprint"
    spec = process.spec or DeploymentSpec()
    if process.used_bytes is not None:
        return _Claim(name, process.used_bytes, Basis.MEASURED, "nvml process used")
    if process.allocator is not None:
        nccl = spec.nccl_bytes or 0
        context = spec.cuda_context_bytes or 0
        return _Claim(
            name,
            process.allocator.reserved_bytes + nccl + context,
            Basis.ESTIMATED,
            "allocator reserved + spec NCCL + CUDA context estimate",
        )
    estimate = sum(claim.bytes for claim in _components(process, spec))
    return _Claim(name, estimate, Basis.ESTIMATED, "sum of engine and spec figures")


def _pool_claims(stats: AllocatorStats) -> list[_Claim]:
    # The fragmented part is kept out of the allocator reserve so the two lines never count the
    # same bytes: inactive split blocks are reserved-but-unallocated too.
    split = stats.inactive_split_bytes or 0
    reserve_source = (
        "allocator reserved - allocated - inactive split"
        if stats.inactive_split_bytes is not None
        else "allocator reserved - allocated (inactive split not reported)"
    )
    claims = [
        _Claim(
            "allocator reserve",
            stats.pool_free_bytes - split,
            Basis.MEASURED,
            reserve_source,
            LineKind.ALLOCATOR_RESERVE,
        ),
        _Claim("allocated", stats.allocated_bytes, Basis.MEASURED, "allocator allocated"),
    ]
    if stats.inactive_split_bytes is not None:
        claims.insert(
            0,
            _Claim(
                "fragmentation",
                split,
                Basis.MEASURED,
                "allocator inactive_split_bytes",
                LineKind.FRAGMENTATION,
            ),
        )
    return claims


def _leaf_claims(
    process: ProcessSnapshot, footprint: _Claim, notes: list[str]
) -> tuple[list[_Claim], _Claim]:
    """The fitted leaf claims of a process, and the unattributed remainder of its footprint."""
    where = process.label
    spec = process.spec or DeploymentSpec()
    if process.allocator is None:
        leaves = _fit(footprint.bytes, _components(process, spec), where, notes)
        rest = footprint.bytes - sum(claim.bytes for claim in leaves)
        return leaves, _Claim(
            "unattributed",
            rest,
            _remainder_basis(footprint.basis, leaves),
            "process used not explained by its components",
            LineKind.UNATTRIBUTED,
        )

    stats = process.allocator
    pool_claim = _Claim("allocator pool", stats.reserved_bytes, Basis.MEASURED, "allocator")
    pool, *outside = _fit(
        footprint.bytes,
        [pool_claim, *_spec_claims(spec, LineKind.COMMUNICATION)],
        where,
        notes,
    )
    *pool_leaves, allocated = _fit(pool.bytes, _pool_claims(stats), where, notes)
    inside = _fit(
        allocated.bytes,
        [
            *_spec_claims(spec, LineKind.MODEL_WEIGHTS),
            *_kv_claims(process, spec),
            *_spec_claims(spec, LineKind.CUDA_GRAPHS),
        ],
        where,
        notes,
    )
    # Without a weights figure the allocated remainder would hide the weights: call it
    # unattributed rather than pass it off as workspace.
    workspace_kind, workspace_source = (
        (LineKind.WORKSPACE, "allocator allocated - weights - KV pool - graph pools")
        if spec.weights_bytes is not None
        else (LineKind.UNATTRIBUTED, "allocator allocated, not broken down (no weights figure)")
    )
    workspace = _Claim(
        "workspace",
        allocated.bytes - sum(claim.bytes for claim in inside),
        _remainder_basis(allocated.basis, inside),
        workspace_source,
        workspace_kind,
    )
    rest = footprint.bytes - pool.bytes - sum(claim.bytes for claim in outside)
    context = _Claim(
        "CUDA context",
        rest,
        _remainder_basis(footprint.basis, [pool, *outside]),
        "process used - allocator reserved - NCCL (CUDA context, library workspaces)",
        LineKind.CUDA_CONTEXT,
    )
    return [*inside, workspace, *pool_leaves, *outside], context


def _process_lines(
    process: ProcessSnapshot, footprint: _Claim, notes: list[str]
) -> list[LedgerLine]:
    leaves, unattributed = _leaf_claims(process, footprint, notes)
    usage = process.kv_cache.usage_fraction if process.kv_cache is not None else None
    lines = []
    for claim in [*leaves, unattributed]:
        assert claim.kind is not None, "only leaf claims become lines"
        if claim.kind is LineKind.KV_CACHE_USE_UNKNOWN and usage is not None:
            used = round(claim.bytes * usage)
            source = f"{claim.source} x engine KV usage {usage:.1%}"
            split = [(LineKind.KV_CACHE_USED, used), (LineKind.KV_CACHE_UNUSED, claim.bytes - used)]
            lines += [
                LedgerLine(kind, size, claim.basis, source, process.deployment, process.pid)
                for kind, size in split
            ]
        else:
            lines.append(
                LedgerLine(
                    claim.kind,
                    claim.bytes,
                    claim.basis,
                    claim.source,
                    process.deployment,
                    process.pid,
                )
            )
    return lines


def build_ledger(snapshot: CardSnapshot) -> CardLedger:
    """The card's ledger at the snapshot's moment (use ``snapshot_at`` for a past moment)."""
    notes: list[str] = []
    where = f"card {snapshot.card_id}"
    footprints = [_footprint(process) for process in snapshot.processes]
    driver, used = _card_claims(snapshot, notes)
    if used is None:
        used = _Claim(
            "used",
            sum(claim.bytes for claim in footprints),
            Basis.ESTIMATED,
            "sum of process footprints",
        )
    driver, used = _fit(snapshot.total_bytes, [driver, used], where, notes)
    footprints = _fit(used.bytes, footprints, where, notes)

    lines = [LedgerLine(LineKind.DRIVER_RESERVED, driver.bytes, driver.basis, driver.source)]
    for process, footprint in zip(snapshot.processes, footprints, strict=True):
        lines += _process_lines(process, footprint, notes)
    lines.append(
        LedgerLine(
            LineKind.UNATTRIBUTED,
            used.bytes - sum(claim.bytes for claim in footprints),
            _remainder_basis(used.basis, footprints),
            f"{used.source} not accounted for by any process",
        )
    )
    free = snapshot.total_bytes - driver.bytes - used.bytes
    lines.append(
        LedgerLine(
            LineKind.FREE,
            free,
            _remainder_basis(Basis.MEASURED, [driver, used]),
            "total - driver reserved - used",
        )
    )
    if snapshot.free_bytes is not None and snapshot.free_bytes != free:
        notes.append(
            f"{where}: nvml free {snapshot.free_bytes:,} B differs from total - reserved - used"
            f" = {free:,} B; the free line is the latter"
        )
    return CardLedger(
        snapshot.card_id, snapshot.at, snapshot.total_bytes, tuple(lines), tuple(notes)
    )
