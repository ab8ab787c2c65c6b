"""KV-cache sizing: bytes per token, reservations, and the gap to the recommended one.

A KV reservation is P95 (or historical peak) concurrency x tokens per request x bytes per
token x (1 + buffer). The policy buffer is 15-20%; :func:`kv_reservation_bytes` accepts any
buffer in ``[0, 1]`` and leaves policy checks to :mod:`inventory.analytics.kv_advisor`.
"""

import math
from dataclasses import dataclass
from fractions import Fraction

POLICY_BUFFER_MIN = 0.15
POLICY_BUFFER_MAX = 0.20
DEFAULT_BUFFER = 0.20
# A reservation within 10% of the mean need is a mean-level reservation whatever its label.
MEAN_TOLERANCE = 0.10

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4,
    "float32": 4,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "e4m3": 1,
    "e5m2": 1,
    "int8": 1,
    "int4": 0.5,
}


class UnknownDtypeError(ValueError):
    pass


def bytes_per_element(dtype: str) -> float:
    """Bytes one element of ``dtype`` takes, by its usual names (case-insensitive)."""
    key = dtype.strip().lower().replace("-", "_")
    try:
        return DTYPE_BYTES[key]
    except KeyError:
        known = ", ".join(sorted(DTYPE_BYTES))
        raise UnknownDtypeError(f"unknown KV dtype {dtype!r}; known: {known}") from None


def kv_bytes_per_token(
    layers: int,
    kv_heads: int,
    head_dim: int,
    dtype_bytes: float | str,
    *,
    mla: bool = False,
    kv_lora_rank: int | None = None,
    qk_rope_head_dim: int | None = None,
) -> float:
    """KV-cache bytes one token occupies on one card.

    Standard attention stores a key and a value per KV head: ``2 x layers x kv_heads x head_dim
    x dtype_bytes``. MLA (DeepSeek-V2/V3) caches one compressed latent plus the decoupled RoPE
    key per layer, with no separate value and so no factor 2: ``layers x (kv_lora_rank +
    qk_rope_head_dim) x dtype_bytes``; ``kv_heads`` and ``head_dim`` are then ignored. For the
    figure on one card of a TP/PP deployment use :func:`kv_bytes_per_token_per_card`.
    """
    element = bytes_per_element(dtype_bytes) if isinstance(dtype_bytes, str) else dtype_bytes
    if element <= 0:
        raise ValueError(f"dtype_bytes must be > 0, got {element}")
    if layers <= 0:
        raise ValueError(f"layers must be > 0, got {layers}")
    if mla:
        if kv_lora_rank is None or qk_rope_head_dim is None:
            raise ValueError("MLA needs kv_lora_rank and qk_rope_head_dim")
        if kv_lora_rank <= 0 or qk_rope_head_dim < 0:
            raise ValueError("kv_lora_rank must be > 0 and qk_rope_head_dim >= 0")
        return layers * (kv_lora_rank + qk_rope_head_dim) * element
    if kv_heads <= 0 or head_dim <= 0:
        raise ValueError("kv_heads and head_dim must be > 0")
    return 2 * layers * kv_heads * head_dim * element


@dataclass(frozen=True)
class KvShape:
    """What decides a model's KV cache size: its layers and how each layer caches a token.

    Standard (multi-head or grouped-query) attention caches a key and a value per KV head;
    MLA (``mla=True``: DeepSeek-V2/V3, Kimi) caches one latent of ``kv_lora_rank`` plus the
    decoupled RoPE key of ``qk_rope_head_dim`` per layer.
    """

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: float | str
    mla: bool = False
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None

    def bytes_per_token(self, *, kv_heads: int | None = None, layers: int | None = None) -> float:
        return kv_bytes_per_token(
            self.layers if layers is None else layers,
            self.kv_heads if kv_heads is None else kv_heads,
            self.head_dim,
            self.dtype_bytes,
            mla=self.mla,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
        )


def layers_per_stage(layers: int, pipeline_parallel: int) -> int:
    """Layers on the fullest pipeline stage: stages split the layers as evenly as they can
    (vLLM ``get_pp_indices`` gives the remainder to single stages), so one holds the ceiling."""
    return -(-layers // pipeline_parallel)


def kv_heads_per_card(kv_heads: int, tensor_parallel: int) -> int:
    """KV heads each tensor-parallel rank caches: split over the ranks, but never below one;
    with more ranks than heads each head is replicated (vLLM ``ModelConfig.get_num_kv_heads``:
    ``max(1, total_num_kv_heads // tensor_parallel_size)``)."""
    return max(1, kv_heads // tensor_parallel)


def kv_bytes_per_token_per_card(
    shape: KvShape, tensor_parallel: int = 1, pipeline_parallel: int = 1
) -> float:
    """KV bytes one token takes on each card of a deployment (its fullest pipeline stage).

    - GQA/MHA: the KV heads split over tensor parallelism, replicated when TP exceeds them.
    - MLA: the latent is one "head" shared by all query heads, so every TP rank caches it
      whole (vLLM ``get_num_kv_heads`` returns 1 under MLA): TP does not shrink it.
    - Pipeline parallelism splits the layers: each stage caches only its own.
    """
    if tensor_parallel < 1 or pipeline_parallel < 1:
        raise ValueError("tensor_parallel and pipeline_parallel must be >= 1")
    layers = layers_per_stage(shape.layers, pipeline_parallel)
    if shape.mla:
        return shape.bytes_per_token(layers=layers)
    return shape.bytes_per_token(
        layers=layers, kv_heads=kv_heads_per_card(shape.kv_heads, tensor_parallel)
    )


@dataclass(frozen=True)
class CardKv:
    """A deployment's KV reservation as each of its cards holds it."""

    bytes: int
    bytes_per_token: float | None  # on one card; None when the model's shape is unknown
    how: str  # a code: "shape" (from the architecture) or "even_split" (shape unknown)


def kv_reservation_per_card(
    reservation_bytes: int,
    shape: KvShape | None,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
) -> CardKv:
    """The one figure of a deployment's KV memory on each card, for advisor, ledger, gates and
    metrics alike.

    ``reservation_bytes`` is the deployment's whole reservation: tokens x the model's bytes per
    token (all layers and KV heads) x (1 + buffer). Each card holds those tokens at its own
    bytes per token (:func:`kv_bytes_per_token_per_card`), so an MLA model at TP=8 holds the
    whole reservation on every card, not an eighth of it. Without a shape the reservation is
    split evenly over the cards, labelled ``even_split``.
    """
    cards = tensor_parallel * pipeline_parallel
    if shape is None:
        return CardKv(-(-reservation_bytes // max(1, cards)), None, "even_split")
    per_card = kv_bytes_per_token_per_card(shape, tensor_parallel, pipeline_parallel)
    whole = shape.bytes_per_token()
    share = _exact(reservation_bytes) * _exact(per_card) / _exact(whole)
    return CardKv(math.ceil(share), per_card, "shape")


def _exact(value: float) -> Fraction:
    # Through str so that a policy figure such as 0.2 means exactly 1/5: the binary float
    # 0.2 is slightly larger and would round a reservation up by a spurious byte.
    return Fraction(str(value)) if isinstance(value, float) else Fraction(value)


def kv_reservation_bytes(
    concurrency: float, tokens_per_request: float, bytes_per_token: float, buffer: float
) -> int:
    """``concurrency x tokens_per_request x bytes_per_token x (1 + buffer)``, rounded up."""
    if not 0 <= buffer <= 1:
        raise ValueError(f"buffer must be in [0, 1] (0.15-0.20 by policy), got {buffer}")
    if concurrency < 0 or tokens_per_request < 0 or bytes_per_token < 0:
        raise ValueError("concurrency, tokens_per_request and bytes_per_token must be >= 0")
    exact = (
        _exact(concurrency)
        * _exact(tokens_per_request)
        * _exact(bytes_per_token)
        * (1 + _exact(buffer))
    )
    return math.ceil(exact)


def whole_requests(concurrency: float) -> int:
    """Concurrency rounded up: a reservation for 12.4 requests fails the 13th."""
    # Rounded first so that float noise (12.000000000000002) does not add a request.
    return math.ceil(round(concurrency, 9))


def recommended_kv_reservation_bytes(
    concurrency: float, tokens_per_request: float, bytes_per_token: float, buffer: float
) -> int:
    """The reservation a deployment needs: ``ceil(concurrency)`` whole requests x tokens per
    request x bytes per token x (1 + buffer). ``concurrency`` is P95 (or the peak) of the
    one-minute peaks of running requests over the last 7 days."""
    return kv_reservation_bytes(
        whole_requests(concurrency), tokens_per_request, bytes_per_token, buffer
    )


def kv_reservation_gap_bytes(recommended_bytes: int, current_bytes: int) -> int:
    """Recommended minus current reservation: positive means under-reserved by that much."""
    return recommended_bytes - current_bytes


@dataclass(frozen=True)
class KvPool:
    """A deployment's KV on one card three ways, never mixed up: the pool the engine allocated,
    the part of it in use, and what the console's policy reserves for it."""

    pool_bytes: int | None  # the engine's pool on this card; None when the engine says nothing
    pool_source: str  # a code: "engine_bytes", "engine_blocks", "not_reported"
    in_use_bytes: int | None  # the engine's usage fraction x its pool
    reserved_by_policy_bytes: int  # the deployment's reservation on this card
    memory_fraction: float | None  # the share of the card the engine was started with


def engine_kv_pool(
    reserved_by_policy_bytes: int,
    *,
    bytes_per_token_per_card: float | None,
    usage_fraction: float | None,
    pool_tokens: int | None,
    pool_bytes: int | None,
    memory_fraction: float | None = None,
) -> KvPool:
    """The engine's KV pool on one card, from what it reported (vLLM ``cache_config_info``).

    vLLM and SGLang report KV usage as a fraction of the pool *they* allocated (vLLM sizes it
    from ``gpu_memory_utilization``, or ``--kv-cache-memory-bytes`` per GPU; each worker holds
    ``num_gpu_blocks`` blocks of ``block_size`` tokens), so in-use bytes are that fraction of
    the pool, never of the console's reservation. The pool in bytes is the stated figure, else
    the pool's tokens x this card's bytes per token (needs the model's shape).
    """
    if pool_bytes:
        pool, source = pool_bytes, "engine_bytes"
    elif pool_tokens and bytes_per_token_per_card:
        pool, source = math.ceil(pool_tokens * bytes_per_token_per_card), "engine_blocks"
    else:
        pool, source = None, "not_reported"
    in_use = (
        round(pool * usage_fraction) if pool is not None and usage_fraction is not None else None
    )
    return KvPool(pool, source, in_use, reserved_by_policy_bytes, memory_fraction)
