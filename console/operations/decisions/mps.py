"""When the console may restart a card's MPS server again: backoff, and a cap per hour."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    first_delay_s: float = 5.0  # after the crash, before the first restart
    backoff_factor: float = 2.0
    max_delay_s: float = 600.0
    max_per_hour: int = 3


def next_attempt(
    crashed_at: float,
    attempts: int,
    restarts_last_hour: list[float],
    now: float,
    policy: RestartPolicy = RestartPolicy(),
) -> float | None:
    """When the next restart may run (epoch seconds); None when the hourly cap is spent.

    `attempts` counts the restarts already made for this crash; `restarts_last_hour` the
    moments of every restart on the card in the hour before `now`, whatever crash they were
    for, so that a server crashing over and over is not restarted without end.
    """
    recent = [t for t in restarts_last_hour if now - t < 3600.0]
    if len(recent) >= policy.max_per_hour:
        return None
    delay = min(policy.max_delay_s, policy.first_delay_s * policy.backoff_factor**attempts)
    since = max([crashed_at, *recent]) if attempts else crashed_at
    return max(now, since + delay)


def clients_returned(expected: list[str], pids_now: dict[str, list[int]], old: dict[str, int]):
    """For each expected client (a deployment's runtime name), its new PID if it is back: a
    process of that deployment on the card with a PID it did not have before the crash."""
    back = {}
    for name in expected:
        fresh = [pid for pid in pids_now.get(name, []) if pid != old.get(name)]
        if fresh:
            back[name] = fresh[0]
    return back
