"""What a process holds on a card outside its caching allocator: CUDA context and libraries.

NVML's per-process used memory is the allocator's reserved pool plus everything allocated
beside it: the CUDA context, cuBLAS/cuBLASLt and NCCL workspaces, kernels' module images.
A co-tenant's demand must count it, as NVML does, or the memory gate under-counts every
process on the card by this much.

- Measured: NVML per-process used minus allocator reserved, where both are known.
- Otherwise an estimate per card type. The one measurement so far is the H200 check of
  2026-11-30 (driver 580.159.04, ``tests/fixtures/nvml-h200/gpu-check.json``,
  ``docs/gpu-check.md``): 518 MiB per process with no library loaded (516 MiB for an MPS
  client). Other card types take that figure as an estimate, labelled so, until measured.
  An engine with cuBLAS and NCCL loaded holds more; that part stays in the workspace
  allowance beside it, except NCCL's connection buffers, estimated below for the memory ledger.

NCCL's buffers, for a process of a tensor-parallel group (two cards or more; one card opens no
communicator). NCCL allocates them with cudaMalloc, outside PyTorch's allocator, one set per
channel for the ring peer it receives from, for each of its three protocols (NVIDIA/nccl
``src/init.cc`` ``DEFAULT_BUFFSIZE`` and ``DEFAULT_LL_BUFFSIZE``/``DEFAULT_LL128_BUFFSIZE`` from
``src/include/device.h``): Simple 4 MiB (``NCCL_BUFFSIZE``'s default), LL 8 x 512 x 8 x 16 B
= 512 KiB, LL128 120 x 640 x 8 x 8 B = 4800 KiB. NCCL picks the number of channels from the
topology when the communicator starts; an NVLink ring on 8-GPU H100/H200 boards gets up to 32,
the count taken here so that the ledger does not under-count: 32 x 9.19 MiB = 294 MiB a card.
An estimate, labelled so: NVLS, tree connections and an engine's own all-reduce buffers (vLLM's
custom all-reduce) come on top, and ``NCCL_BUFFSIZE``/``NCCL_MAX_NCHANNELS`` change it.
"""

from dataclasses import dataclass

MIB = 1024**2

# Product name as NVML reports it -> bytes of CUDA context measured for one process.
MEASURED_CONTEXT_BYTES: dict[str, int] = {"NVIDIA H200": 518 * MIB}
MEASURED_ON = "NVIDIA H200"
DEFAULT_CONTEXT_BYTES = MEASURED_CONTEXT_BYTES[MEASURED_ON]


NCCL_SIMPLE_BUFFER_BYTES = 1 << 22  # DEFAULT_BUFFSIZE, 4 MiB
NCCL_LL_BUFFER_BYTES = 8 * 512 * 8 * 16  # LL lines/thread x max threads x steps x line bytes
NCCL_LL128_BUFFER_BYTES = 120 * 640 * 8 * 8  # LL128 elems/thread x max threads x steps x 8 B
NCCL_CHANNELS = 32
NCCL_SOURCE = "estimate: NCCL default buffers, 32 channels x (4 MiB + 512 KiB + 4800 KiB)"


def nccl_buffer_estimate(cards: int) -> int | None:
    """NCCL's connection buffers on each card of a deployment spread over `cards` cards, or
    None for a single card, which opens no communicator."""
    if cards < 2:
        return None
    per_channel = NCCL_SIMPLE_BUFFER_BYTES + NCCL_LL_BUFFER_BYTES + NCCL_LL128_BUFFER_BYTES
    return NCCL_CHANNELS * per_channel


@dataclass(frozen=True)
class ContextOverhead:
    bytes: int
    measured: bool
    source: str  # a code: "nvml_used_minus_allocator", "card_type_measured", "h200_estimate"


def cuda_context_estimate(product_name: str) -> ContextOverhead:
    """The context one process holds on a card of this type, when nothing measured it."""
    for name, size in MEASURED_CONTEXT_BYTES.items():
        # NVML names the same card with suffixes ("NVIDIA H200 NVL", "... 141GB HBM3e").
        if product_name.startswith(name):
            return ContextOverhead(size, False, "card_type_measured")
    return ContextOverhead(DEFAULT_CONTEXT_BYTES, False, "h200_estimate")


def outside_allocator(
    nvml_used_bytes: int | None, allocator_reserved_bytes: int | None, product_name: str
) -> ContextOverhead:
    """Bytes a process holds beyond its allocator pool: measured where NVML and the allocator
    both report the process, else the card type's estimate."""
    if nvml_used_bytes is not None and allocator_reserved_bytes is not None:
        return ContextOverhead(
            max(0, nvml_used_bytes - allocator_reserved_bytes), True, "nvml_used_minus_allocator"
        )
    return cuda_context_estimate(product_name)


SOURCE_LABELS = {
    "nvml_used_minus_allocator": "measured: NVML process used - allocator reserved",
    "card_type_measured": "estimate: CUDA context measured on this card type",
    "h200_estimate": "estimate: 518 MiB CUDA context measured on an H200, not on this type",
}
