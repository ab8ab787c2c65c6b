"""Bring the console up with one command, and run its checks with another.

    python -m console.launcher run         database, migrations, demo fleet, worker, beat, web
    python -m console.launcher test [ARGS] lint, Django checks and the whole pytest suite
    python -m console.launcher bench       the benchmarks behind docs/benchmarks.md
    python -m console.launcher clean-data  stop the embedded database and delete var/

Without DATABASE_URL the embedded PostgreSQL is started here and stopped again on exit.
`run` supervises its children (console.supervisor): one that dies is logged and started again
with growing pauses, while the others go on. Only Ctrl-C or SIGTERM to this process stops
them all (and the embedded database); a kill -9 of it leaves nothing behind either, since
every child is told to die with it. Exactly one beat is started: two would send every
periodic task twice.
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from console.catalogue import compile_catalogues
from console.supervisor import Supervisor
from inventory.env import load_env_file
from inventory.telemetry.simulator import operations_scenario

BASE_DIR = Path(__file__).resolve().parent.parent
# The operations demo's host (docs/operations.md, "The demo's story").
OPERATIONS_HOST = operations_scenario.HOST
OPERATIONS_ACTIONS = BASE_DIR / "inventory/telemetry/simulator/operations_actions.toml"
OPERATIONS_SECRET = BASE_DIR / "var" / "agent" / f"{OPERATIONS_HOST}.secret"
# The demo fleet's host secrets, for its simulator agent (seed_demo --secrets-file).
DEMO_FLEET_SECRETS = BASE_DIR / "var" / "agent" / "demo-fleet.secrets.json"
OPERATIONS_MPS_CRASH_AFTER_S = 150.0
SIMULATOR_QUEUE = "host.simulator"  # inventory.collection.SIMULATOR_QUEUE
PYTHON = sys.executable
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")


def say(message: str) -> None:
    print(f"[console] {message}", flush=True)


@contextlib.contextmanager
def database() -> Iterator[str]:
    """Yield a database URL; start (and afterwards stop) the embedded server if needed."""
    configured = os.environ.get("DATABASE_URL")
    if configured:
        yield configured
        return
    from console.database import (
        EMBEDDED_DATA_DIR,
        embedded_database_url,
        embedded_server_running,
        stop_embedded_server,
    )

    started_here = not embedded_server_running()
    if started_here:
        say(f"starting the embedded PostgreSQL in {EMBEDDED_DATA_DIR.relative_to(BASE_DIR)}")
    url = embedded_database_url()
    try:
        yield url
    finally:
        if started_here:
            say("stopping the embedded PostgreSQL")
            stop_embedded_server()


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([PYTHON, "manage.py", *args], cwd=BASE_DIR, env=env, check=True)


def _wait_for_http(url: str, timeout_s: float, supervisor: Supervisor) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        supervisor.poll()
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as response:
            if response.status == 200:
                return True
        time.sleep(0.5)
    return False


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop


def run() -> int:
    bind = os.environ.get("WEB_BIND", "127.0.0.1")
    port = os.environ.get("WEB_PORT", "8000")
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    # Beat keeps its schedule state here (the database and the broker make their own folders).
    (BASE_DIR / "var").mkdir(exist_ok=True)
    say("compiling the translations")
    compile_catalogues()
    with database() as url:
        env = {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}
        supervisor = Supervisor(env, cwd=BASE_DIR, say=say)
        try:
            say("applying migrations")
            _manage(env, "migrate", "--noinput", "-v", "0")
            say("bringing the default runbook notes up to date")
            _manage(env, "sync_runbook_library")
            say("loading the demo fleet and demo users")
            _manage(env, "seed_demo", "--secrets-file", str(DEMO_FLEET_SECRETS))
            say(f"loading the operations demo host {OPERATIONS_HOST}")
            _manage(env, "seed_operations_demo")
            _manage(env, "register_host", OPERATIONS_HOST, "--secret-file",
                    str(OPERATIONS_SECRET))  # fmt: skip
            celery = [PYTHON, "-m", "celery", "-A", "console"]
            quiet = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
            supervisor.start(
                "worker",
                [*celery, "worker", "-n", "central@%h", "-Q", "celery", "-c", "2",
                 "-l", "info", *quiet],
            )  # fmt: skip
            supervisor.start("ingest", [PYTHON, "manage.py", "ingest_worker"])
            supervisor.start("beat", [*celery, "beat", "-l", "info", "-s", "var/celerybeat"])
            agent = [PYTHON, "-m", "celery", "-A", "inventory.agent.app", "worker",
                     "--pool", "threads", "-c", "2", "-l", "info", *quiet]  # fmt: skip
            for name, argv, agent_env in simulator_agents(agent, time.time()):
                supervisor.start(name, argv, env=agent_env)
            local_host = _local_nvml_host()
            if local_host:
                say(f"NVIDIA GPUs found: collecting {local_host} through NVML as well")
                secret = BASE_DIR / "var" / "agent" / f"{local_host}.secret"
                _manage(env, "register_host", local_host, "--collector", "nvml",
                        "--secret-file", str(secret))  # fmt: skip
                supervisor.start(
                    "agent",
                    [*agent, "-n", f"agent@{local_host}", "-Q", f"host.{local_host}"],
                    env={
                        "AGENT_SOURCE": "nvml",
                        "AGENT_HOST": local_host,
                        "AGENT_SECRET_FILE": str(secret),
                    },
                )
            supervisor.start(
                "web",
                [PYTHON, "-m", "gunicorn", "console.wsgi", "-c", "python:console.gunicorn_conf",
                 "-b", f"{bind}:{port}",
                 "--workers", "2", "--threads", "4", "--access-logfile", "-"],
            )  # fmt: skip
            base = f"http://{bind}:{port}"
            if not _wait_for_http(f"{base}/healthz", 120, supervisor):
                say("the console did not answer /healthz within 120 s; stopping")
                return 1
            _banner(base, env)
            # A child that dies is restarted by the supervisor; only a signal ends this loop.
            while True:
                supervisor.poll()
                time.sleep(0.5)
        except _Stop:
            say("stopping")
            return 0
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            supervisor.stop_all()


def simulator_agents(agent: list[str], now: float) -> list[tuple[str, list[str], dict]]:
    """(name, argv, environment) of the demo's simulator agents: the demo fleet's, with its
    hosts' secrets, and the operations demo host's own, with its actions file (simulated
    actions only) and its secret, on the queue inventory.collection gives that host. Each signs
    its hosts' batches (and the operations agent its outcomes) as a real host's agent does."""
    return [
        (
            "sim",
            [*agent, "-n", "simulator@%h", "-Q", SIMULATOR_QUEUE],
            # The demo's scripted incidents make alerts fire in the first minutes.
            {
                "AGENT_SOURCE": "simulator",
                "AGENT_SECRET_FILE": str(DEMO_FLEET_SECRETS),
                "DEMO_INCIDENTS": os.environ.get("DEMO_INCIDENTS", "true"),
            },
        ),
        (
            "sim-operations",
            [*agent, "-n", "simulator-operations@%h", "-Q", f"{SIMULATOR_QUEUE}.operations"],
            {
                "AGENT_SOURCE": "simulator",
                "SIMULATOR_FLEET": "operations",
                "AGENT_ACTIONS_FILE": str(OPERATIONS_ACTIONS),
                "AGENT_SECRET_FILE": str(OPERATIONS_SECRET),
                # Its own record of the requests it ran, apart from the demo fleet agent's.
                "AGENT_STATE_DIR": str(BASE_DIR / "var" / "agent" / "operations"),
                "SIMULATOR_ENDPOINTS_PORT": "0",
                # Card 1's MPS server crashes once card 0's degradation has settled.
                "SIMULATOR_MPS_CRASH_AT": str(now + OPERATIONS_MPS_CRASH_AFTER_S),
            },
        ),
    ]


def _local_nvml_host() -> str | None:
    """This machine's name when it has NVIDIA GPUs that NVML can read, else None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library, no permission: no local GPUs to collect
        return None
    return socket.gethostname() if count else None


def _banner(base: str, env: dict[str, str]) -> None:
    password = env.get("DEMO_PASSWORD", "colocate-demo")
    lines = [
        "",
        f"  The GPU co-location console is up: {base}/",
        "",
        "  Demo logins (password for all: " + password + "):",
        "    oncall    on-call staff: host health, runbooks, events",
        "    approver  change approver: signs off placement proposals",
        "    manager   reads everything, changes nothing",
        "    admin     superuser, for /admin/",
        "",
        f"  Operations demo (KV shrink, MPS restart, off-peak reload): "
        f"{base}/hosts/{OPERATIONS_HOST}/operations/",
        f"  Health: {base}/healthz   readiness: {base}/readyz",
        "  Press Ctrl-C to stop everything.",
        "",
    ]
    print("\n".join(lines), flush=True)


def test(pytest_args: list[str]) -> int:
    with database() as url:
        template, template_url = _suite_template(url)
        env = {**os.environ, "DATABASE_URL": url, "TEST_DATABASE_TEMPLATE": template}
        steps = [
            # Migrated once, beside the checks: each pytest worker's test database is then a
            # copy of it (CREATE DATABASE ... TEMPLATE), not four migrations at once on two
            # cores (about 28 s a worker).
            (
                "migrating the suite's template database",
                [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"],
                {"DATABASE_URL": template_url},
            ),
            ("ruff check", [PYTHON, "-m", "ruff", "check", "."]),
            ("ruff format --check", [PYTHON, "-m", "ruff", "format", "--check", "."]),
            ("import contracts", [str(Path(PYTHON).parent / "lint-imports")]),
            ("manage.py check", [PYTHON, "manage.py", "check", "--fail-level", "WARNING"]),
            (
                "makemigrations --check",
                [PYTHON, "manage.py", "makemigrations", "--check", "--dry-run"],
            ),
            (
                "makemessages: every marked string translated",
                [PYTHON, "-m", "console.catalogue", "check"],
            ),
        ]
        if not _all_pass(steps, env):
            return 1
        if not Path(CHROMIUM).exists():
            say(
                f"chromium not found at {CHROMIUM}: SKIPPING THE BROWSER TESTS "
                "(install Debian's chromium package, or set CHROMIUM_PATH)"
            )
        say("compiling the translations")
        compile_catalogues()
        # Twice the cores: the end-to-end and browser tests spend most of their time waiting
        # on processes they started, so a core runs two workers' tests (measured: 2 workers
        # 887 s, 3 workers 718 s, 4 workers 671 s on two cores).
        workers = env.get("TEST_WORKERS") or str(2 * (os.cpu_count() or 1))
        profile = env.get("HYPOTHESIS_PROFILE") or "dev"
        say(
            f"pytest on {workers} workers; property tests in hypothesis' {profile} profile"
            + (
                ""
                if profile == "ci"
                else " (a fifth of CI's examples; HYPOTHESIS_PROFILE=ci for all)"
            )
        )
        parallel = ["-n", workers, "--dist", "loadgroup"] if workers != "1" else []
        try:
            return subprocess.run(
                [PYTHON, "-m", "pytest", *parallel, *pytest_args], cwd=BASE_DIR, env=env
            ).returncode
        finally:
            _drop_database(url, template)


def _suite_template(url: str) -> tuple[str, str]:
    """An empty database for the suite's template, made anew, and its URL."""
    import psycopg

    parts = urllib.parse.urlsplit(url)
    name = f"{parts.path.strip('/') or 'postgres'}_suite_template"
    _drop_database(url, name)
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name))
        )
    return name, urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def _drop_database(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                psycopg.sql.Identifier(name)
            )
        )


def _all_pass(steps: list[tuple], env: dict) -> bool:
    """Run the checks side by side (each is mostly start-up); show each one's output in order.
    A step is (label, argv) or (label, argv, environment of its own over `env`)."""
    say("checks: " + ", ".join(step[0] for step in steps))
    running = [
        (step[0], subprocess.Popen(step[1], cwd=BASE_DIR, env={**env, **(step[2:] or [{}])[0]},
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for step in steps
    ]  # fmt: skip
    passed = True
    for label, process in running:
        output, _ = process.communicate()
        if process.returncode != 0:
            sys.stdout.write(output)
            say(f"{label} failed")
            passed = False
    return passed


def bench() -> int:
    with database() as url:
        env = {**os.environ, "DATABASE_URL": url}
        return subprocess.run(
            [PYTHON, "-m", "tests.bench.run_all"], cwd=BASE_DIR, env=env
        ).returncode


def clean_data() -> int:
    from console.database import EMBEDDED_DATA_DIR, stop_embedded_server

    stop_embedded_server()
    for folder in (EMBEDDED_DATA_DIR, BASE_DIR / "var" / "broker"):
        if folder.exists():
            shutil.rmtree(folder)
            say(f"deleted {folder.relative_to(BASE_DIR)}")
    return 0


def main(argv: list[str]) -> int:
    load_env_file()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    commands = {"run": run, "bench": bench, "clean-data": clean_data}
    if argv and argv[0] == "test":
        return test(argv[1:])
    if len(argv) != 1 or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    return commands[argv[0]]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
