"""The launcher's supervisor, with real child processes: restarts with backoff, stops on request."""

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from console.supervisor import RestartPolicy, Supervisor

REPOSITORY = Path(__file__).resolve().parents[2]
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def supervise():
    made = []

    def make(policy: RestartPolicy) -> tuple[Supervisor, list[str], list[str]]:
        said, echoed = [], []
        supervisor = Supervisor(
            dict(os.environ), cwd=REPOSITORY, policy=policy, say=said.append, echo=echoed.append
        )
        made.append(supervisor)
        return supervisor, said, echoed

    yield make
    for supervisor in made:
        supervisor.stop_all(grace_s=2)


def _poll_until(supervisor: Supervisor, condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        supervisor.poll()
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in {"Z", "X"}  # a zombie no one has reaped yet is dead all the same


def test_a_failing_child_is_logged_and_restarted_with_doubling_pauses_up_to_the_cap(supervise):
    supervisor, said, _ = supervise(RestartPolicy(0.2, 0.8, stable_after_s=60))
    supervisor.start("flaky", _python("import sys; sys.exit(3)"))
    started_at = {1: time.monotonic()}

    def fifth_start():
        started_at.setdefault(supervisor.starts("flaky"), time.monotonic())
        return supervisor.starts("flaky") == 5

    _poll_until(supervisor, fifth_start)

    exits = [line for line in said if line.startswith("flaky exited")]
    assert len(exits) == 4
    assert all("(exit code 3)" in line for line in exits)
    assert [line.rsplit("restarting in ", 1)[1] for line in exits] == [
        "0.2 s",
        "0.4 s",
        "0.8 s",
        "0.8 s",
    ]
    assert "restarting flaky (start 5)" in said
    gaps = [started_at[n + 1] - started_at[n] for n in range(1, 5)]
    assert all(gap >= pause for gap, pause in zip(gaps, [0.2, 0.4, 0.8, 0.8], strict=True))


def test_a_child_killed_with_sigkill_comes_back_and_the_others_go_on(supervise):
    supervisor, said, _ = supervise(RestartPolicy(0.1, 1.0))
    supervisor.start("ingest", SLEEPER)
    supervisor.start("web", SLEEPER)
    killed, web = supervisor.pid("ingest"), supervisor.pid("web")

    os.kill(killed, signal.SIGKILL)
    _poll_until(supervisor, lambda: supervisor.starts("ingest") == 2)

    assert any(line.startswith("ingest exited (killed by SIGKILL)") for line in said)
    assert supervisor.pid("ingest") != killed and _alive(supervisor.pid("ingest"))
    assert supervisor.pid("web") == web and _alive(web)
    assert supervisor.starts("web") == 1


def test_a_child_that_stayed_up_a_while_starts_again_from_the_first_pause(supervise):
    supervisor, said, _ = supervise(RestartPolicy(0.1, 5.0, stable_after_s=0.3))
    supervisor.start("steady", _python("import sys, time; time.sleep(0.5); sys.exit(1)"))

    _poll_until(supervisor, lambda: supervisor.starts("steady") == 4)

    exits = [line for line in said if line.startswith("steady exited")]
    assert [line.rsplit("restarting in ", 1)[1] for line in exits] == ["0.1 s"] * 3


def test_stop_all_ends_every_child_and_its_children_and_restarts_none(supervise):
    supervisor, _, echoed = supervise(RestartPolicy(0.1, 1.0))
    supervisor.start("sleeper", SLEEPER)
    # Ignores SIGTERM, and leaves a grandchild in its process group, as a pool worker would.
    supervisor.start(
        "stubborn",
        _python(
            "import signal, subprocess, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
            "print('grandchild', child.pid, flush=True)\n"
            "time.sleep(120)\n"
        ),
    )
    supervisor.start("crashed", _python("import sys; sys.exit(3)"))
    _poll_until(supervisor, lambda: any("grandchild" in line for line in echoed))
    grandchild = int(next(line for line in echoed if "grandchild" in line).split()[-1])
    sleeper, stubborn = supervisor.pid("sleeper"), supervisor.pid("stubborn")

    supervisor.stop_all(grace_s=1)

    assert supervisor.children["sleeper"].proc.returncode == -signal.SIGTERM
    assert supervisor.children["stubborn"].proc.returncode == -signal.SIGKILL
    _poll_until(supervisor, lambda: not any(map(_alive, (sleeper, stubborn, grandchild))), 5)
    starts = {name: supervisor.starts(name) for name in supervisor.children}
    for _ in range(3):  # one poll to notice an exit, a later one to start it again
        supervisor.poll()
        time.sleep(0.2)
    assert {name: supervisor.starts(name) for name in supervisor.children} == starts
