"""What a served model asks of a card: weights, KV cache per token, traffic over the day."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from inventory.telemetry.simulator.noise import ValueNoise, stream_id

DAY_S = 86_400.0
_GRID = 1440  # one point per simulated minute when shaping the day
_DIURNAL_SHARPNESS = 2.5  # how narrow the daily bump is (von Mises concentration)

ReservationBasis = Literal["mean", "p95"]


@dataclass(frozen=True, slots=True)
class ModelShape:
    layers: int
    kv_heads: int
    head_dim: int
    kv_dtype_bytes: int = 2
    mla: bool = False  # multi-head latent attention stores one latent, not K and V

    @property
    def kv_bytes_per_token(self) -> int:
        factor = 1 if self.mla else 2
        return factor * self.layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes


@dataclass(frozen=True, slots=True)
class Traffic:
    """Concurrency (requests in flight) over a day: a diurnal bump times smooth noise."""

    mean_concurrency: float
    p95_concurrency: float
    peak_hour: float  # UTC hour of the daily peak
    noise_sigma: float = 0.15  # lognormal sigma of the multiplicative noise
    noise_period_s: float = 900.0


@dataclass(frozen=True, slots=True)
class Workload:
    model: str
    engine: str  # "vllm", "sglang", "tgi", "tei", "ollama"
    shape: ModelShape
    weights_bytes: int
    workspace_bytes: int  # per process: activations, CUDA graphs, NCCL buffers
    tokens_per_request: int  # average context held in KV per in-flight request
    traffic: Traffic
    base_latency_s: float  # median request latency alone on idle cards
    restart_s: float = 180.0  # weights load after a crash
    context_bytes: int = 512 * 1024 * 1024  # CUDA context + cuBLAS, outside the allocator

    @property
    def kv_bytes_per_request(self) -> int:
        # An embedding server (TEI) runs each batch through once and keeps no KV cache.
        if self.engine == "tei":
            return 0
        return self.tokens_per_request * self.shape.kv_bytes_per_token

    def kv_bytes(self, concurrency: float) -> float:
        return concurrency * self.kv_bytes_per_request

    def kv_reservation_bytes(self, basis: ReservationBasis, buffer: float = 0.0) -> int:
        """Reservation at mean or P95 concurrency, times (1 + buffer)."""
        traffic = self.traffic
        concurrency = traffic.p95_concurrency if basis == "p95" else traffic.mean_concurrency
        return int(self.kv_bytes(concurrency) * (1.0 + buffer))


class DiurnalTraffic:
    """Concurrency(t) whose daily mean and P95 (before noise) match the Traffic figures.

    shape(t) = base + amp * g(t), g a von Mises bump at the peak hour. mean(shape) = 1 and
    P95(shape) = p95 / mean fix base and amp in closed form, since shape is monotone in g.
    """

    __slots__ = ("_amp", "_base", "_mean", "_noise", "_peak_s", "_sigma")

    def __init__(self, traffic: Traffic, seed: int, name: str) -> None:
        g = sorted(_bump(i * DAY_S / _GRID, 0.0) for i in range(_GRID))
        g_mean = sum(g) / _GRID
        g_p95 = g[int(0.95 * _GRID)]
        ratio = traffic.p95_concurrency / traffic.mean_concurrency
        self._amp = (ratio - 1.0) / (g_p95 - g_mean)
        self._base = 1.0 - self._amp * g_mean
        if self._base < 0.02:
            raise ValueError(f"{name}: P95/mean = {ratio:.2f} is too peaky for a daily bump")
        self._mean = traffic.mean_concurrency
        self._peak_s = traffic.peak_hour * 3600.0
        self._sigma = traffic.noise_sigma
        self._noise = ValueNoise(seed, stream_id("traffic", name), traffic.noise_period_s)

    def __call__(self, t: float) -> float:
        shape = self._base + self._amp * _bump(t, self._peak_s)
        sigma = self._sigma
        return self._mean * shape * math.exp(sigma * self._noise(t) - 0.5 * sigma * sigma)


def _bump(t: float, peak_s: float) -> float:
    angle = 2.0 * math.pi * (t - peak_s) / DAY_S
    return math.exp(_DIURNAL_SHARPNESS * (math.cos(angle) - 1.0))
