"""Real worker, agent and beat processes for end-to-end tests, on the test database."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from django.db import connection

BASE_DIR = Path(__file__).resolve().parent.parent
QUIET = ["--without-gossip", "--without-mingle", "--without-heartbeat"]


def database_url_for_processes() -> str:
    """The URL of the database this test runs on, for processes started from it."""
    conf = connection.settings_dict
    host = conf.get("HOST") or conf.get("OPTIONS", {}).get("host", "")
    user = quote(conf.get("USER") or "postgres")
    password = f":{quote(conf['PASSWORD'])}" if conf.get("PASSWORD") else ""
    name = conf["NAME"]
    if host.startswith("/"):
        return f"postgresql://{user}{password}@/{name}?host={quote(host)}"
    port = f":{conf['PORT']}" if conf.get("PORT") else ""
    return f"postgresql://{user}{password}@{host}{port}/{name}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not start")


def start_logged(
    argv: list[str], env: dict[str, str], log: Path, *, program: list | None = None, cwd=BASE_DIR
) -> subprocess.Popen:
    """A Python child of the checkout in a session of its own (so a kill takes it whole), or
    `program` (another interpreter, an installed command) run from `cwd`."""
    return subprocess.Popen(
        [*(program or [sys.executable]), *argv],
        cwd=cwd,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


class Processes:
    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.log_dir = log_dir
        self.children: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = self.log_dir / f"{name}.log"
        self.children[name] = start_logged(argv, {**self.env, **(env or {})}, log)

    def start_program(self, name: str, argv: list, env: dict[str, str], cwd: Path) -> None:
        """A program outside the checkout (an installed agent) with `env` alone, in `cwd`."""
        log = self.log_dir / f"{name}.log"
        self.children[name] = start_logged([], env, log, program=argv, cwd=cwd)

    def celery_worker(self, name: str, queues: str, env: dict[str, str] | None = None) -> None:
        self.start(
            name,
            ["-m", "celery", "-A", "console", "worker", "-n", f"{name}@%h", "-Q", queues,
             "-c", "1", "-l", "info", *QUIET],
            env,
        )  # fmt: skip

    def agent(self, name: str, queue: str, env: dict[str, str]) -> None:
        # A state folder of its own: the checkout's var/agent would hand this agent the plans
        # and the outbox of an earlier test's agent.
        env = {"AGENT_STATE_DIR": str(self.log_dir / f"{name}-state"), **env}
        self.start(
            name,
            ["-m", "celery", "-A", "inventory.agent.app", "worker", "-n", f"{name}@%h",
             "-Q", queue, "--pool", "threads", "-c", "1", "-l", "info", *QUIET],
            env,
        )  # fmt: skip

    def beat(self, log_dir: Path) -> None:
        self.start(
            "beat",
            ["-m", "celery", "-A", "console", "beat", "-l", "info",
             "-s", str(log_dir / "celerybeat")],
        )  # fmt: skip

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for proc in self.children.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.children.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def wait_for(
    predicate: Callable[[], object], timeout: float, what: str, logs: Callable | None = None
):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    detail = f"\n{logs()}" if logs else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")


def simulator_secrets(directory: Path, names: list[str]) -> dict[str, str]:
    """The AGENT_SECRET_FILE of a simulator agent that collects the demo hosts `names`, which
    the test registers once the agent runs (demo_host_signed): written before it starts, as
    seed_demo --secrets-file writes the demo's."""
    path = directory / "simulator-secrets.json"
    path.write_text(json.dumps({name: f"{name}-test-secret" for name in names}))
    return {"AGENT_SECRET_FILE": str(path)}


def demo_host_signed(name: str):
    """The demo fleet's host `name`, registered with the secret simulator_secrets handed out."""
    from inventory.demo import _create_host
    from inventory.models import Host
    from inventory.telemetry.simulator.scenarios import demo_fleet_specs

    host = _create_host(next(spec for spec in demo_fleet_specs() if spec.name == name))
    Host.objects.filter(pk=host.pk).update(agent_secret=f"{name}-test-secret")
    host.refresh_from_db()
    return host
