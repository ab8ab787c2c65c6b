"""The rehearsal of a real host: the installed agent distribution (`python -m inventory.agent
--source nvml`, the unit's command) samples NVIDIA's own mock of the NVML C library through
nvidia-ml-py, as the unit's unprivileged user (no capability, no new privileges), and publishes
signed batches through the broker to a real ingest worker; beat, a Celery worker and the alert
evaluation run as in production. The mock is changed while the agent runs (its
`overrides.yaml`): processes appear and go, memory rises past 95%, an Xid is delivered through
the event set, a card falls off the bus. The test times each change to the host page and to
its alert, and writes the timeline to test-artifacts/mock-nvml-rehearsal.json.

The mock serves no MIG devices: MIG is rehearsed against the project's fake NVML
(tests/inventory/ingest/test_mig_layout.py), as docs/signals.md's table says.
"""

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from console.alerts.models import Alert, AlertRule
from inventory.models import CollectorStatus, Event, Gpu, Host
from tests.deploy.as_the_unit import UNIT_UID, unit_command
from tests.isolated_broker import IsolatedBroker
from tests.mock_nvml import CHECKOUT, VENDORED, MockNvml
from tests.processes import Processes, database_url_for_processes, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

HOST = "mock-a100"
TOTAL = 85899345920  # the mock's A100 80GB
MIB = 1024**2
ARTIFACTS = CHECKOUT / "test-artifacts"


def _override(mock: MockNvml, card0: dict, card1: dict | None = None) -> None:
    """Each write replaces the last (the mock layers it on the pristine config)."""
    devices = {"0": card0, **({"1": card1} if card1 else {})}
    mock.override(json.dumps({"version": 1, "all": {}, "devices": devices}))


def _memory(used_mib: int) -> dict:
    used = used_mib * MIB
    return {"total_bytes": TOTAL, "used_bytes": used, "free_bytes": TOTAL - used}


def _process(pid: int, name: str, mib: int) -> dict:
    return {"pid": pid, "type": "C", "name": name, "used_memory_mib": mib}


@pytest.fixture
def rehearsal(agent_venv, tmp_path):
    if os.uname().machine != "x86_64":
        pytest.skip("the vendored mock NVML is built for x86_64 Linux")
    host = Host.objects.create(name=HOST, collector=Host.Collector.NVML)
    # The 95% rule at once, not after its 30 s: the timeline measures the signal's path.
    AlertRule.objects.filter(slug="card-memory-95").update(for_s=0)
    # A folder the unit's user can reach: pytest's own temporary folders are root's alone.
    work = Path(tempfile.mkdtemp(prefix="mock-rehearsal-"))
    work.chmod(0o755)
    (work / "nvml").mkdir(mode=0o755)
    # NVIDIA's example, without the Xid its card 1 raises on the first call: the test injects
    # its own and times it.
    example = (VENDORED / "example-config.yaml").read_text()
    config, failure = example.split("    failure:\n")
    assert "xid: {code: 48}" in failure and failure.rstrip().endswith("48}")
    mock = MockNvml(work / "nvml", config)
    broker = IsolatedBroker.for_test(work)
    broker.purge(f"host.{HOST}")
    secret = work / "agent.secret"
    secret.write_text(host.agent_secret)
    secret.chmod(0o400)
    state = work / "state"
    state.mkdir()
    command, unit_env, who = unit_command(agent_venv, work)
    if os.geteuid() == 0:  # what the unit's user must own: its secret, state and broker folder
        folder = [broker.folder, *broker.folder.rglob("*")] if broker.folder else []
        for path in (secret, state, *folder):
            os.chown(path, UNIT_UID, UNIT_UID)
    processes = Processes(
        {
            "DATABASE_URL": database_url_for_processes(),
            # The plan beat sends the agent: a batch every 2 s, and the plan itself as often.
            "AGENT_FLUSH_INTERVAL_S": "2",
            "COLLECTION_PLAN_INTERVAL_S": "2",
            "ALERT_EVALUATION_INTERVAL_S": "2",
            **broker.env,
        },
        tmp_path,
    )
    processes.celery_worker("central", "celery")
    processes.start("ingest", ["manage.py", "ingest_worker", "--max-wait", "0.2"])
    processes.beat(tmp_path)
    agent_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(work),
        "LANG": "C.UTF-8",
        "INGEST_QUEUE_NAME": os.environ.get("INGEST_QUEUE_NAME", "ingest"),
        "CELERY_BROKER_URL": broker.url if broker.folder is None else "filesystem://",
        **broker.env,
        **mock.env,
        "LD_LIBRARY_PATH": os.pathsep.join(
            p for p in (mock.env["LD_LIBRARY_PATH"], unit_env.get("LD_LIBRARY_PATH")) if p
        ),
        "AGENT_SOURCE": "nvml",
        "AGENT_HOST": HOST,
        "AGENT_SECRET_FILE": str(secret),
        "AGENT_STATE_DIR": str(state),
        "AGENT_FLUSH_INTERVAL_S": "2",
        "AGENT_KERNEL_LOG": "off",
        "AGENT_MPS": "off",
    }
    processes.start_program("agent", [*command, "-m", "inventory.agent"], agent_env, cwd=work)
    yield host, mock, processes, who
    processes.stop()
    shutil.rmtree(work, ignore_errors=True)


def _logs(processes):
    return lambda: "\n".join(
        f"--- {name} ---\n{processes.log(name)[-3000:]}"
        for name in ("agent", "ingest", "central", "beat")
    )


def _firing(slug: str, **where):
    return Alert.objects.filter(rule__slug=slug, state=Alert.State.FIRING, **where).first()


def test_the_installed_agent_on_nvidias_mock_nvml_from_processes_to_alerts(rehearsal, client_as):
    host, mock, processes, who = rehearsal
    logs = _logs(processes)
    page = client_as("oncall")

    def host_page() -> str:
        answer = page.get(f"/hosts/{HOST}/")
        assert answer.status_code == 200
        return answer.content.decode()

    timeline: dict[str, dict[str, float]] = {}

    def step(name: str, change, *, shows=None, alert=None, timeout: float = 90) -> None:
        started = time.monotonic()
        change()
        seen: dict[str, float] = {}
        if shows is not None:
            wait_for(lambda: shows(host_page()), timeout, f"{name} on the host page", logs)
            seen["page_s"] = round(time.monotonic() - started, 1)
        if alert is not None:
            wait_for(alert, timeout, f"the alert of {name}", logs)
            seen["alert_s"] = round(time.monotonic() - started, 1)
        timeline[name] = seen

    # The cards, found by the agent through the real binding, discovered by ingest.
    second_card = "GPU-00000000-0000-0000-0000-000000000001"
    step("first batch", lambda: None, shows=lambda text: second_card in text, timeout=150)
    assert Gpu.objects.filter(host=host).count() == 2
    assert "4242" in host_page()  # the config's compute process; its graphics one is no tenant
    step(
        "a process appears",
        lambda: _override(
            mock, {"memory": _memory(34096), "processes": [
                _process(4242, "python3", 4096), _process(5151, "vllm-serve", 30000)]}
        ),
        shows=lambda text: "5151" in text,
    )  # fmt: skip
    step(
        "memory past 95%",
        lambda: _override(
            mock, {"memory": _memory(79500), "processes": [
                _process(4242, "python3", 4096), _process(5151, "vllm-serve", 75404)]}
        ),
        alert=lambda: _firing("card-memory-95", gpu__index=0),
    )  # fmt: skip
    step(
        "the process goes",
        lambda: _override(
            mock, {"memory": _memory(4096), "processes": [_process(4242, "python3", 4096)]}
        ),
        shows=lambda _: Event.objects.filter(
            host=host, kind=Event.Kind.PROCESS_EXIT, detail__pid=5151
        ).exists(),
    )
    steady = {"memory": _memory(4096), "processes": [_process(4242, "python3", 4096)]}
    step(
        "an Xid",
        lambda: _override(
            mock, steady, {"failure": {"mode": "ecc_uncorrectable", "xid": {"code": 48}}}
        ),
        shows=lambda text: (
            Event.objects.filter(host=host, kind=Event.Kind.XID).exists() and "48" in text
        ),
        alert=lambda: _firing("xid-hardware") or _firing("xid-memory"),
    )
    step(
        "a card off the bus",
        lambda: _override(mock, steady, {"failure": {"mode": "fallen_off_bus"}}),
        shows=lambda _: Event.objects.filter(host=host, kind=Event.Kind.GPU_LOST).exists(),
        alert=lambda: _firing("gpu-lost"),
    )

    # The mock may deliver its Xid again when its override changes: each on card 1, as 48.
    xids = Event.objects.filter(host=host, kind=Event.Kind.XID)
    assert xids and {(x.gpu.index, x.detail["xid"]) for x in xids} == {(1, 48)}
    lost = Event.objects.get(host=host, kind=Event.Kind.GPU_LOST)
    assert lost.gpu.index == 1
    gone = Event.objects.get(host=host, kind=Event.Kind.PROCESS_EXIT, detail__pid=5151)
    assert gone.gpu.index == 0
    export = client_as("manager").get("/events/export.csv")
    events = b"".join(export.streaming_content).decode()
    assert "gpu_lost" in events and "xid" in events
    status = CollectorStatus.objects.get(host=host)
    assert status.last_batch_at is not None
    assert "Permission denied" not in processes.log("agent")

    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "mock-nvml-rehearsal.json").write_text(
        json.dumps({"agent_ran_as": who, "seconds": timeline}, indent=2)
    )
    print(json.dumps(timeline))
