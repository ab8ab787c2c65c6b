"""End to end, a host collected through the real NVML code path: beat sends the host's plan,
the host's agent process (AGENT_SOURCE=nvml, the fake NVML given as its NVML module, the fake
MPS control binary on its PATH) tails the deployment's engine log, watches the process lists
and asks the MPS daemon; its signed batches go through the broker to an ingest worker and land
in PostgreSQL. The OOM history, triage, events and MPS view fill from those sources alone:
no simulator anywhere."""

import json
import os
from pathlib import Path

import pytest

from inventory.models import CollectorFault, CollectorStatus, Deployment, Event, Host
from inventory.reports.analysis import mps_groups
from inventory.telemetry.simulator.catalogue import device_uuid
from tests.factories import DeploymentFactory, GpuFactory, HostFactory
from tests.processes import Processes, database_url_for_processes, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]
GIB = 2**30
HOST = "gpu-e2e-01"
FAKE_MPS = Path(__file__).resolve().parent / "agent" / "fake_mps"


def _state(path: Path, processes) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"host": HOST, "cards": 2, "processes": processes}))
    os.replace(temporary, path)  # the agent never reads half a file


def _mps_seen(host) -> str:
    """What the console holds of the host's MPS, for a failure to show."""
    status = CollectorStatus.objects.filter(host=host).first()
    faults = CollectorFault.objects.filter(host=host, call="mps_control").values_list(
        "last_at", "error", "message"
    )
    kinds = sorted(set(Event.objects.filter(host=host).values_list("kind", flat=True)))
    return (
        f"--- console ---\nmps_servers {status and status.mps_servers} at "
        f"{status and status.mps_seen_at}\nmps_control faults {list(faults)}\nevents {kinds}\n"
    )


def _daemon(pipe_dir: Path, servers: dict) -> None:
    # Whole or not at all: the agent's MPS monitor reads it every 0.5 s, and a half-written
    # file reads as a daemon not answering.
    temporary = pipe_dir / "daemon.json.tmp"
    temporary.write_text(json.dumps({"servers": servers}))
    os.replace(temporary, pipe_dir / "daemon.json")


@pytest.fixture
def real_host(settings, tmp_path, isolated_broker):
    settings.AGENT_FLUSH_INTERVAL_S = 2.0
    settings.COLLECTION_PLAN_INTERVAL_S = 2.0
    host = HostFactory(name=HOST, collector=Host.Collector.NVML)
    gpus = [GpuFactory(host=host, index=i, uuid=device_uuid(HOST, i)) for i in range(2)]
    log = tmp_path / "chat.log"
    log.write_text("")
    common = {"host": host, "gpus": [gpus[0]], "isolation_mode": Deployment.Isolation.MPS}
    chat = DeploymentFactory(
        **common, served_model__name="chat", process_name_pattern="/srv/chat/", log_path=str(log)
    )
    embed = DeploymentFactory(**common, served_model__name="embed",
                              process_name_pattern="/srv/embed/")  # fmt: skip
    state = tmp_path / "nvml.json"
    server = [0, 900, "nvidia-cuda-mps-server", GIB // 4, "compute"]
    _state(state, [server, [1, 900, "nvidia-cuda-mps-server", GIB // 4, "compute"],
                   [0, 901, "/srv/chat/bin/python3", 60 * GIB, "mps"],
                   [0, 902, "/srv/embed/bin/python3", 15 * GIB, "mps"]])  # fmt: skip
    pipe_dir = tmp_path / "mps"
    pipe_dir.mkdir()
    _daemon(pipe_dir, {"900": [901, 902]})
    secret = tmp_path / "secret"
    secret.write_text(host.agent_secret)
    isolated_broker.purge(f"host.{HOST}")
    env = {"DATABASE_URL": database_url_for_processes(), **isolated_broker.env}
    processes = Processes(env, tmp_path)
    processes.celery_worker("central", "celery")
    processes.start("ingest", ["manage.py", "ingest_worker", "--max-wait", "0.2"])
    processes.agent(
        "agent",
        f"host.{HOST}",
        {
            "AGENT_SOURCE": "nvml",
            "AGENT_HOST": HOST,
            "AGENT_NVML_MODULE": "tests.inventory.agent.file_driven_nvml",
            "FAKE_NVML_STATE": str(state),
            "AGENT_SECRET_FILE": str(secret),
            "AGENT_STATE_DIR": str(tmp_path / "agent-state"),
            "AGENT_KERNEL_LOG": "off",
            "AGENT_MPS_INTERVAL_S": "0.5",
            "CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir),
            "PATH": f"{FAKE_MPS}{os.pathsep}{os.environ['PATH']}",
        },
    )
    processes.beat(tmp_path)
    yield host, chat, embed, state, log, pipe_dir, processes
    processes.stop()


def _logs(processes):
    return lambda: "\n".join(
        f"--- {name} ---\n{processes.log(name)[-3000:]}"
        for name in ("central", "ingest", "agent", "beat")
    )


def test_a_real_hosts_oom_exit_restart_and_mps_crash_fill_the_console(real_host, client_as):
    host, chat, _, state, log, pipe_dir, processes = real_host
    logs = _logs(processes)
    wait_for(
        lambda: CollectorStatus.objects.filter(host=host).exclude(mps_servers=[]).exists(),
        timeout=150, what="the live MPS state from the agent", logs=logs,
    )  # fmt: skip
    (group,) = mps_groups(host)
    assert group.live and group.server_pid == 900
    assert sorted(group.models) == ["chat", "embed"]
    assert group.card.count("+") == 1  # the server spans both cards

    with log.open("a") as engine:
        engine.write(
            "(VllmWorker TP0 pid=901) ERROR 12-01 10:00:00 [x.py:1] torch.OutOfMemoryError: CUDA "
            "out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
            "of which 2.00 GiB is free. Of the allocated memory 58.00 GiB is allocated by "
            "PyTorch, and 1.50 GiB is reserved by PyTorch but unallocated.\n"
        )
    server = [0, 900, "nvidia-cuda-mps-server", GIB // 4, "compute"]
    server1 = [1, 900, "nvidia-cuda-mps-server", GIB // 4, "compute"]
    embedder = [0, 902, "/srv/embed/bin/python3", 15 * GIB, "mps"]
    _state(state, [server, server1, embedder])
    wait_for(
        lambda: Event.objects.filter(host=host, kind="process_exit").exists()
        and Event.objects.filter(host=host, kind="oom").exists(),
        timeout=60, what="the OOM and the exit", logs=logs,
    )  # fmt: skip
    _state(state, [server, server1, embedder, [0, 950, "/srv/chat/bin/python3", 5 * GIB, "mps"]])
    _daemon(pipe_dir, {"900": [902, 950]})
    wait_for(
        lambda: Event.objects.filter(host=host, kind="process_restart").exists(),
        timeout=60, what="the restart", logs=logs,
    )  # fmt: skip
    _daemon(pipe_dir, {})
    _state(state, [])
    wait_for(
        lambda: Event.objects.filter(host=host, kind="mps_server_down").exists(),
        timeout=60, what="the MPS server down", logs=lambda: _mps_seen(host) + logs(),
    )  # fmt: skip

    oom = Event.objects.get(host=host, kind="oom")
    assert oom.deployment == chat and oom.gpu.index == 0
    assert oom.snapshot["requested_bytes"] == 4 * GIB
    assert oom.cause and oom.cause_explanation
    exit_ = Event.objects.get(host=host, kind="process_exit", detail__pid=901)
    assert exit_.detail["oom_evidence"] == ["engine_log"]
    restart = Event.objects.get(host=host, kind="process_restart")
    assert restart.deployment == chat and restart.detail["new_pids"] == [950]
    down = Event.objects.get(host=host, kind="mps_server_down")
    assert {c["pid"] for c in down.detail["clients"]} == {902, 950}

    history = client_as("manager").get("/oom/")
    assert history.status_code == 200 and "chat" in history.content.decode()
    page = client_as("oncall").get(f"/hosts/{HOST}/")
    text = page.content.decode()
    assert page.status_code == 200 and oom.cause in text
    assert "Process exit" in text and "probable OOM" in text and "engine_log" in text
