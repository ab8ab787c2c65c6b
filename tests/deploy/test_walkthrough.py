"""docs/deploy.md, "A second machine in ten minutes", step by step: a machine that is not the
console's (a network namespace) installs the agent alone and shows up on the fleet board.

The central side runs as the Procfile has it (ingest worker, Celery worker, beat) on a private
Redis; the host is registered with its secret file; the agent's virtualenv holds only the
agent's wheel (conftest.py) and reaches the broker over the namespace's link. Without a GPU
the agent's source is the simulator, which the walkthrough offers for that case.
"""

import os
import signal
import subprocess

import pytest
from django.core.management import call_command

from inventory.models import CollectorStatus, Gpu, Host
from tests.deploy.conftest import clean_env
from tests.deploy.netns import REDIS, SimulatedMachine, namespaces_missing, start_redis
from tests.processes import Processes, database_url_for_processes, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def second_machine():
    if reason := namespaces_missing():
        pytest.skip(f"no network namespaces here ({reason}); the walkthrough needs one")
    if REDIS is None:
        pytest.skip("redis-server is not installed")
    machine = SimulatedMachine(9)
    try:
        machine.create()
        yield machine
    finally:
        machine.destroy()


def test_a_second_machines_agent_installed_alone_shows_up_on_the_fleet_board(
    second_machine, agent_venv, client_as, settings, tmp_path
):
    redis, port = start_redis([second_machine.gateway], tmp_path)
    central = Processes(
        {
            "DATABASE_URL": database_url_for_processes(),
            "CELERY_BROKER_URL": f"redis://127.0.0.1:{port}/0",
            "AGENT_FLUSH_INTERVAL_S": "2",
        },
        tmp_path,
    )
    agent = None
    try:
        # Central: the Procfile's processes (the test database stands for the release step).
        central.start("ingest", ["manage.py", "ingest_worker", "--max-wait", "0.2"])
        central.celery_worker("worker", "celery")
        central.beat(tmp_path)
        # Step 1 of the walkthrough: register the host, its secret into a file.
        settings.COLLECTION_PLAN_INTERVAL_S = 2.0
        secret = tmp_path / "agent.secret"
        call_command("register_host", "infer-01", "--collector", "simulated",
                     "--secret-file", str(secret))  # fmt: skip
        assert oct(secret.stat().st_mode & 0o777) == "0o600"
        # Steps 2-3, on the other machine: its settings file, then the agent.
        config = tmp_path / "agent.env"
        config.write_text(
            "AGENT_SOURCE=simulator\n"
            f"CELERY_BROKER_URL=redis://{second_machine.gateway}:{port}/0\n"
            f"AGENT_SECRET_FILE={secret}\nAGENT_STATE_DIR={tmp_path / 'agent-state'}\n"
        )
        agent = subprocess.Popen(
            ["ip", "netns", "exec", second_machine.namespace,
             agent_venv / "bin" / "gpu-console-agent", "--config", config],
            cwd=tmp_path, env=clean_env(), stdout=(tmp_path / "agent.log").open("w"),
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

        def logs() -> str:
            names = ["agent", "ingest", "worker", "beat"]
            return "\n".join(
                f"--- {n} ---\n{(tmp_path / f'{n}.log').read_text(errors='replace')[-2500:]}"
                for n in names
            )

        host = Host.objects.get(name="infer-01")
        wait_for(
            lambda: CollectorStatus.objects.filter(host=host, batches__gte=2).exists(),
            timeout=240,
            what="two batches of infer-01 from the other machine",
            logs=logs,
        )
        # Step 4: the fleet board shows it, live, with the cards its first batch announced.
        html = client_as("oncall").get("/", {"partial": "1"}).content.decode()
        row = html.split('data-host="infer-01"', 1)[1].split("</tr>", 1)[0]
        assert "stale" not in row
        assert "8 cards" in row
        assert Gpu.objects.filter(host=host).count() == 8
    finally:
        if agent is not None and agent.poll() is None:
            os.killpg(agent.pid, signal.SIGTERM)
            agent.wait(30)
        central.stop()
        redis.terminate()
        redis.wait(10)
