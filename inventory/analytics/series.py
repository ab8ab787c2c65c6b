"""Time series as ``(epoch seconds, value)`` pairs, and the two joins the analytics need.

- :func:`align_on_common_timestamps` for series sampled on the same grid (rollups): keep only
  the moments every series has, so "at the same moment" means exactly that.
- :func:`as_of` for irregular samples (per-request latencies against a gauge): the value a
  gauge had at a moment is its latest reading at or before it, if that reading is fresh.
"""

from collections.abc import Mapping, Sequence

import numpy as np

Sample = tuple[float, float]


def align_on_common_timestamps(
    series: Mapping[str, Sequence[Sample]],
) -> tuple[tuple[float, ...], dict[str, tuple[float, ...]]]:
    """The timestamps present in every series (ascending) and each series' values at them."""
    by_name: dict[str, dict[float, float]] = {}
    for name, samples in series.items():
        values = dict(samples)
        if len(values) != len(samples):
            raise ValueError(f"series {name!r} has duplicate timestamps")
        by_name[name] = values
    if not by_name:
        return (), {}
    common = sorted(set.intersection(*(set(values) for values in by_name.values())))
    return tuple(common), {
        name: tuple(values[at] for at in common) for name, values in by_name.items()
    }


def as_of(samples: np.ndarray, at: np.ndarray, max_age_s: float) -> tuple[np.ndarray, np.ndarray]:
    """A gauge's value at each of the moments ``at``: its latest reading at or before the
    moment, if no older than ``max_age_s``. ``samples`` is an ``(n, 2)`` array of ``(epoch s,
    value)`` rows in any order; of two readings at one moment the higher counts (the last in
    ``sorted`` order). Returns the values (meaningless where not fresh) and whether each is fresh.
    """
    if not len(samples):
        return np.zeros(len(at)), np.zeros(len(at), dtype=bool)
    order = np.lexsort((samples[:, 1], samples[:, 0]))
    times, values = samples[order, 0], samples[order, 1]
    index = np.searchsorted(times, at, side="right") - 1
    latest = np.maximum(index, 0)
    fresh = (index >= 0) & ~(at - times[latest] > max_age_s)
    return values[latest], fresh
