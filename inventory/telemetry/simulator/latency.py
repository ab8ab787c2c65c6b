"""Request latencies as a fixed-size log-binned histogram (bounded memory, any run length).

Each tick adds the expected number of completed requests, spread lognormally around that tick's
median latency (a precomputed kernel over log-spaced bins).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from inventory.telemetry.engines import latency_quantile

_FIRST_EDGE_S = 0.005
_RATIO = 1.04
_BINS = 260  # 5 ms .. ~130 s
_LOG_RATIO = math.log(_RATIO)
SPREAD_SIGMA = 0.30  # lognormal sigma of per-request latency around the tick's median


def _kernel(sigma: float) -> tuple[int, list[float]]:
    half = math.ceil(4.0 * sigma / _LOG_RATIO)
    weights = []
    for offset in range(-half, half + 1):
        lo = (offset - 0.5) * _LOG_RATIO / sigma
        hi = (offset + 0.5) * _LOG_RATIO / sigma
        weights.append(0.5 * (math.erf(hi / math.sqrt(2)) - math.erf(lo / math.sqrt(2))))
    total = sum(weights)
    return half, [w / total for w in weights]


_HALF, _KERNEL = _kernel(SPREAD_SIGMA)
_MEAN_OVER_MEDIAN = math.exp(0.5 * SPREAD_SIGMA * SPREAD_SIGMA)
UPPER_EDGES = tuple(
    _FIRST_EDGE_S * _RATIO**i for i in range(_BINS)
)  # bin i is (edge[i-1], edge[i]]


def _bin_of(seconds: float) -> int:
    if seconds <= _FIRST_EDGE_S:
        return 0
    return min(_BINS - 1, math.ceil(math.log(seconds / _FIRST_EDGE_S) / _LOG_RATIO))


class LatencyHistogram:
    """Counts by the bin of each tick's median; the lognormal spread is applied on read.

    Spreading is linear, so convolving once per read gives the same bins as spreading every
    tick, and an add stays O(1) however many requests a tick completes.
    """

    __slots__ = ("_bins", "_raw", "count", "sum_s")

    def __init__(self) -> None:
        self._raw = [0.0] * _BINS
        self._bins: list[float] | None = None
        self.count = 0.0
        self.sum_s = 0.0

    def add(self, median_s: float, requests: float) -> None:
        if requests <= 0:
            return
        self._raw[_bin_of(median_s)] += requests
        self._bins = None
        self.count += requests
        # mean of a lognormal with this median
        self.sum_s += requests * median_s * _MEAN_OVER_MEDIAN

    def merge(self, other: LatencyHistogram) -> None:
        raw = self._raw
        for index, value in enumerate(other._raw):
            raw[index] += value
        self._bins = None
        self.count += other.count
        self.sum_s += other.sum_s

    def since(self, earlier: LatencyHistogram) -> LatencyHistogram:
        """What was added after `earlier` (a copy of this histogram then): one window's own."""
        window = LatencyHistogram()
        window._raw = [now - then for now, then in zip(self._raw, earlier._raw, strict=True)]
        window.count = self.count - earlier.count
        window.sum_s = self.sum_s - earlier.sum_s
        return window

    def copy(self) -> LatencyHistogram:
        copied = LatencyHistogram()
        copied.merge(self)
        return copied

    @property
    def bins(self) -> list[float]:
        if self._bins is None:
            bins = [0.0] * _BINS
            for centre, requests in enumerate(self._raw):
                if requests:
                    start = centre - _HALF
                    for offset, weight in enumerate(_KERNEL):
                        index = min(_BINS - 1, max(0, start + offset))
                        bins[index] += weight * requests
            self._bins = bins
        return self._bins

    def quantile(self, q: float) -> float | None:
        """The estimate a Prometheus reader of this histogram gets (its bins as buckets)."""
        bounds = (*UPPER_EDGES, math.inf)
        return latency_quantile(q, list(zip(bounds, self.cumulative_at(bounds), strict=True)))

    def cumulative_at(self, bounds: Iterable[float]) -> list[float]:
        """Cumulative counts at each bound (ascending), as a Prometheus histogram exposes them."""
        bins = self.bins
        result = []
        running, index = 0.0, 0
        for bound in bounds:
            while index < _BINS and UPPER_EDGES[index] <= bound * (1 + 1e-9):
                running += bins[index]
                index += 1
            # The bins' float sum can pass the count by a rounding error; +Inf never falls below.
            result.append(max(self.count, running) if math.isinf(bound) else running)
        return result
