"""The agent installs alone: a fresh virtualenv with its wheel and nothing of the console.

The virtualenv is conftest.py's `agent_venv`; `pip check` here proves its dependencies
complete. The agent runs from there, outside the checkout.
"""

import subprocess
import time

import pytest
from kombu import Connection

from inventory.wire.queue import INGEST_QUEUE
from inventory.wire.schema import Window, check_batch
from tests.deploy.conftest import PIP, clean_env

ABSENT = ("django", "psycopg", "ortools", "rest_framework", "console.settings", "inventory.models")


def test_the_agents_dependencies_are_complete_and_hold_no_console_part(agent_venv):
    python = agent_venv / "bin" / "python"
    check = subprocess.run([*PIP, "--python", python, "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    probe = (
        "import importlib.util, sys\n"
        "def found(name):\n"
        "    try:\n"
        "        return importlib.util.find_spec(name) is not None\n"
        "    except ModuleNotFoundError:\n"
        "        return False\n"
        f"print([name for name in {ABSENT!r} if found(name)])"
    )
    present = subprocess.run(
        [python, "-c", probe], cwd=agent_venv, env=clean_env(), capture_output=True, text=True
    )
    assert present.stdout.strip() == "[]", present.stdout + present.stderr
    installed = subprocess.check_output(
        [*PIP, "--python", python, "list", "--format=freeze"], text=True
    ).lower()
    assert "gpu-colocation-agent==" in installed
    for name in ("django", "ortools", "psycopg"):
        assert f"\n{name}==" not in f"\n{installed}"


def test_the_installed_agent_answers_help_from_its_module_and_its_script(agent_venv):
    for argv in (
        [agent_venv / "bin" / "python", "-m", "inventory.agent", "--help"],
        [agent_venv / "bin" / "gpu-console-agent", "--help"],
    ):
        result = subprocess.run(
            argv, cwd=agent_venv, env=clean_env(), capture_output=True, text=True, timeout=30
        )
        assert result.returncode == 0, result.stderr
        assert "--secret-file" in result.stdout and "AGENT_SECRET_FILE" in result.stdout


def test_the_installed_agent_samples_the_fake_nvml_and_publishes_a_valid_batch(
    agent_venv, tmp_path
):
    broker = tmp_path / "broker"
    config = tmp_path / "agent.env"
    # The file gives the host and the broker; the environment, which wins, the source.
    config.write_text(
        "AGENT_HOST=infer-01\nAGENT_SOURCE=nvml\nCELERY_BROKER_URL=filesystem://\n"
        f"CELERY_FILESYSTEM_BROKER_DIR={broker}\n"
    )
    result = subprocess.run(
        [agent_venv / "bin" / "python", "-m", "inventory.agent", "--config", config, "--once",
         "--once-flush-s", "1", "--state-dir", tmp_path / "state"],
        cwd=tmp_path,
        env=clean_env(
            AGENT_SOURCE="simulator",
            SIMULATOR_ENDPOINTS_PORT="0",
            INGEST_QUEUE_NAME=INGEST_QUEUE.name,
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "published one batch of infer-01" in result.stdout
    assert not (tmp_path / "state").exists(), "--once keeps no plan and no outbox"
    folders = {"data_folder_in": str(broker / "queue"), "data_folder_out": str(broker / "queue")}
    with Connection("filesystem://", transport_options=folders) as conn:
        queue = conn.SimpleQueue(INGEST_QUEUE)
        message = queue.get(timeout=1)
        batch = message.payload
        message.ack()
        with pytest.raises(queue.Empty):
            queue.get(timeout=0.1)
        queue.close()
    assert (batch["host"], batch["seq"]) == ("infer-01", 1)
    assert len(batch["cards"]) == 8, "infer-01 is the demo fleet's 8-card host"
    now = time.time()
    check_batch(batch, Window.around(now, retention_s=3600, skew_s=60))
