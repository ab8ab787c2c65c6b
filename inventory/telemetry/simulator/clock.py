"""Simulated time: stepped explicitly (tests) or running faster than real time (demo, bench).

Both report seconds since the scenario start (`now`) and the matching epoch time
(`epoch_time`), the timestamp collectors and samplers stamp on readings.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from inventory.telemetry.simulator.scenarios import DEMO_EPOCH


class SimulatedClock:
    def __init__(self, start: float = 0.0, epoch: float = DEMO_EPOCH) -> None:
        self._now = start
        self.epoch = epoch

    def now(self) -> float:
        return self._now

    def epoch_time(self) -> float:
        return self.epoch + self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("simulated time does not go backwards")
        self._now += seconds
        return self._now

    def advance_to(self, t: float) -> float:
        return self.advance(max(0.0, t - self._now))


class AcceleratedClock:
    """Simulated seconds = real seconds x speed: speed 2000 runs a simulated day in 43 s."""

    def __init__(
        self,
        speed: float,
        start: float = 0.0,
        epoch: float = DEMO_EPOCH,
        real_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = speed
        self.epoch = epoch
        self._start = start
        self._real_clock = real_clock
        self._real_start = real_clock()

    def now(self) -> float:
        return self._start + (self._real_clock() - self._real_start) * self.speed

    def epoch_time(self) -> float:
        return self.epoch + self.now()

    def real_seconds_until(self, t: float) -> float:
        """How long to sleep for the simulated clock to reach t."""
        return max(0.0, (t - self.now()) / self.speed)
