"""Descriptive statistics over plain sequences of numbers (and sorted numpy arrays).

Percentile definition (the one every analytic here uses): linear interpolation between the
closest ranks, numpy's default (Hyndman & Fan type 7). For ``n`` values sorted ascending as
``x[0..n-1]`` the ``pct``-th percentile sits at rank ``h = (n - 1) * pct / 100`` and is
``x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])``. So P0 is the minimum,
P100 the maximum, and P95 of 20 values is ``x[18] + 0.05 * (x[19] - x[18])``.

Empty input raises ``ValueError``: a statistic of nothing is a caller's bug, not a zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the host agent reads this module and installs no numpy
    import numpy as np


def _non_empty(values: Iterable[float]) -> list[float]:
    items = list(values)
    if not items:
        raise ValueError("statistic of an empty sequence")
    return items


def percentile_ranks(count: int, pct: float) -> tuple[int, int]:
    """The 0-based ranks of the two sorted values the ``pct``-th percentile of ``count``
    values interpolates between (equal at the ends)."""
    below = math.floor((count - 1) * pct / 100)
    return below, min(below + 1, count - 1)


def interpolate_percentile(count: int, pct: float, below: float, above: float) -> float:
    """The ``pct``-th percentile of ``count`` values, given the two at ``percentile_ranks``.

    Split out so that a database can pick those two values and the figure is still this
    module's to the last bit.
    """
    rank = (count - 1) * pct / 100
    return below + (rank - math.floor(rank)) * (above - below)


def percentile(values: Iterable[float], pct: float) -> float:
    if not 0 <= pct <= 100:
        raise ValueError(f"pct must be in [0, 100], got {pct}")
    ordered = sorted(_non_empty(values))
    below, above = percentile_ranks(len(ordered), pct)
    return interpolate_percentile(len(ordered), pct, ordered[below], ordered[above])


def sorted_array_percentile(ordered: np.ndarray, pct: float) -> float:
    """`percentile` of a numpy array already sorted (once for all its percentiles): the same
    two ranks, interpolated by the same function on Python numbers, so the same figure to the
    last bit."""
    below, above = percentile_ranks(len(ordered), pct)
    return interpolate_percentile(len(ordered), pct, ordered[below].item(), ordered[above].item())


def mean(values: Iterable[float]) -> float:
    items = _non_empty(values)
    return math.fsum(items) / len(items)


def count_exceedances(values: Iterable[float], threshold: float) -> int:
    """How many samples are strictly above ``threshold``."""
    return sum(1 for value in values if value > threshold)


def count_excursions(values: Iterable[float], threshold: float) -> int:
    """How many distinct runs of consecutive samples are strictly above ``threshold``.

    One long excursion sampled ten times is one event, not ten; this is the count people mean
    by "exceeded N times".
    """
    excursions = 0
    above = False
    for value in values:
        if value > threshold and not above:
            excursions += 1
        above = value > threshold
    return excursions


def count_array_excursions(values: np.ndarray, threshold: float) -> int:
    """`count_excursions` of a numpy array (in time order): a run starts at each value above
    ``threshold`` whose predecessor is not."""
    above = values > threshold
    return int(above[:1].sum() + (above[1:] & ~above[:-1]).sum())


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """The ``q``-quantile (``q`` in ``[0, 1]``) of a Prometheus-style cumulative histogram.

    ``buckets`` are ``(upper_bound, cumulative_count)`` pairs, the last with bound ``inf``
    (``le="+Inf"``). Same estimate as PromQL's ``histogram_quantile``: find the bucket holding
    rank ``q * total`` and interpolate linearly inside it, taking 0 as the lower bound of the
    first bucket; a rank that falls in the ``+Inf`` bucket returns the highest finite bound,
    since nothing is known above it.
    """
    if not 0 <= q <= 1:
        raise ValueError(f"q must be in [0, 1], got {q}")
    ordered = sorted(buckets)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        raise ValueError("need at least one finite bucket and the +Inf bucket")
    counts = [count for _, count in ordered]
    if any(later < earlier for earlier, later in pairwise(counts)):
        raise ValueError("cumulative bucket counts must not decrease")
    total = counts[-1]
    if total <= 0:
        raise ValueError("histogram holds no observations")
    rank = q * total
    index = next(i for i, count in enumerate(counts) if count >= rank)
    if index == len(ordered) - 1:
        return ordered[-2][0]
    upper, count = ordered[index]
    if index == 0 and upper <= 0:
        return upper
    lower, below = (0.0, 0.0) if index == 0 else ordered[index - 1]
    if count == below:
        return lower
    return lower + (upper - lower) * (rank - below) / (count - below)
