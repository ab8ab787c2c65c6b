"""Keep the console's child processes running until told to stop.

A child that exits, whatever its exit code, is logged and started again after a pause that
doubles with each quick failure (1, 2, 4 ... s, capped) and falls back to the first pause once
the child has stayed up for a while. Only `stop_all` ends them: a dead ingest worker costs the
time to restart it, not the whole console.

Every child runs in its own process group (so a Ctrl-C at the terminal reaches the launcher
only, which then stops the children in order) and is asked to receive SIGTERM should the
launcher itself die.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in each child before exec: ask the kernel to SIGTERM it if the launcher dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass(frozen=True)
class RestartPolicy:
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    # A child that ran this long before it exited failed afresh, not again.
    stable_after_s: float = 60.0

    def delay(self, quick_failures: int) -> float:
        """The pause before the next start, after `quick_failures` exits in a row (>= 1)."""
        return min(self.max_delay_s, self.first_delay_s * 2 ** (quick_failures - 1))


@dataclass
class _Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    quick_failures: int = 0
    restart_at: float | None = None
    starts: int = 0


def _print_now(line: str) -> None:
    print(line, flush=True)


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class Supervisor:
    """Starts named children, streams their output with a prefix, restarts them, stops them."""

    def __init__(
        self,
        env: dict[str, str],
        *,
        cwd: Path,
        policy: RestartPolicy = RestartPolicy(),
        say: Callable[[str], None] = _print_now,
        echo: Callable[[str], None] = _print_now,
    ):
        self.env = env
        self.cwd = cwd
        self.policy = policy
        self.say = say
        self.echo = echo
        self.children: dict[str, _Child] = {}
        self.stopping = False
        self._width = 6

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        child = _Child(name, argv, {**self.env, **(env or {})})
        self.children[name] = child
        self._width = max(self._width, len(name))
        self._spawn(child)

    def pid(self, name: str) -> int:
        return self.children[name].proc.pid

    def starts(self, name: str) -> int:
        return self.children[name].starts

    def _spawn(self, child: _Child) -> None:
        child.proc = subprocess.Popen(
            child.argv,
            cwd=self.cwd,
            env=child.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        child.started_at = time.monotonic()
        child.restart_at = None
        child.starts += 1
        threading.Thread(target=self._pump, args=(child.name, child.proc), daemon=True).start()

    def _pump(self, name: str, proc: subprocess.Popen) -> None:
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.echo(f"{name:>{self._width}} | {line}")

    def poll(self) -> None:
        """Notice children that exited and start those whose pause is over; call it often."""
        if self.stopping:
            return
        now = time.monotonic()
        for child in self.children.values():
            if child.restart_at is None and child.proc.poll() is not None:
                self._schedule_restart(child, now)
            if child.restart_at is not None and now >= child.restart_at:
                self.say(f"restarting {child.name} (start {child.starts + 1})")
                self._spawn(child)

    def _schedule_restart(self, child: _Child, now: float) -> None:
        # Pool workers or gunicorn workers may outlive their leader; they would hold its port.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.proc.pid, signal.SIGKILL)
        ran_s = now - child.started_at
        if ran_s >= self.policy.stable_after_s:
            child.quick_failures = 0
        child.quick_failures += 1
        delay = self.policy.delay(child.quick_failures)
        child.restart_at = now + delay
        self.say(
            f"{child.name} exited ({describe_exit(child.proc.returncode)}) after {ran_s:.1f} s;"
            f" restarting in {delay:g} s"
        )

    def stop_all(self, grace_s: float = 15.0) -> None:
        """SIGTERM every child, SIGKILL what is left after `grace_s`; nothing restarts after."""
        self.stopping = True
        procs = [child.proc for child in self.children.values()]
        # The leaders first, so Celery and gunicorn shut their own workers down cleanly.
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        for proc in procs:
            # The group may still hold grandchildren (pool workers) even when the leader is gone.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
