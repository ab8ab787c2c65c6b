"""Deterministic randomness as a pure function of (seed, stream, time).

A value at simulated time t does not depend on how the clock got there: stepping a day at 1 s
or at 30 s sees the same traffic curve, the same Xid schedule, the same crash times. That is
what makes a run reproducible from its seed and cheap to step coarsely in tests.
"""

from __future__ import annotations

import math
import zlib

_M64 = (1 << 64) - 1


def _mix(x: int) -> int:
    # splitmix64 finaliser: a good 64-bit avalanche in four integer operations
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def stream_id(*names: object) -> int:
    """A stable id for a named stream (Python's str hash changes between processes)."""
    return zlib.crc32("/".join(str(n) for n in names).encode())


def uniform(seed: int, stream: int, k: int) -> float:
    """U[0, 1) for slot k of a stream."""
    return (_mix(_mix((seed & _M64) ^ (stream << 17)) ^ (k & _M64)) >> 11) * (1.0 / (1 << 53))


def gauss(seed: int, stream: int, k: int) -> float:
    """N(0, 1) for slot k of a stream (Box-Muller on two independent uniforms)."""
    u1 = uniform(seed, stream, 2 * k) or 1e-300
    u2 = uniform(seed, stream, 2 * k + 1)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


class ValueNoise:
    """Smooth N(0, ~1) noise: Gaussian knots every `period_s`, smoothstep in between."""

    __slots__ = ("_k", "_period", "_seed", "_stream", "_z0", "_z1")

    def __init__(self, seed: int, stream: int, period_s: float) -> None:
        self._seed, self._stream, self._period = seed, stream, period_s
        self._k = None
        self._z0 = self._z1 = 0.0

    def __call__(self, t: float) -> float:
        position = t / self._period
        k = math.floor(position)
        if k != self._k:
            self._k = k
            self._z0 = gauss(self._seed, self._stream, k)
            self._z1 = gauss(self._seed, self._stream, k + 1)
        s = position - k
        s = s * s * (3.0 - 2.0 * s)
        # rescale so the interpolated value keeps unit variance at every s
        return (self._z0 * (1.0 - s) + self._z1 * s) / math.sqrt((1.0 - s) ** 2 + s * s)
