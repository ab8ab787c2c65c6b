"""Host actions the whole way, as shipped: the console approves seed 002's kinds of host action
(a restart, the off-peak reload of a vLLM unit and of an SGLang container, an MPS restart) and
a restart of a deployment the helper does not list; they go through the broker to the installed
agent (`python -m inventory.agent`, the unit's command, on NVIDIA's mock NVML), run as the
unit's user (uid 65534, exactly the unit's grants, no new privileges: setpriv); the agent's
actions file hands each to the root helper's client; the helper runs what its root-owned file
lists (fake `systemctl` and `docker` record their argv; a reload writes its engine's flag) and
refuses the other; the agent reports each outcome, signed, through the broker to the console's
worker, which records it. The console's audit rows and HostAction states are asserted for
each, and written to test-artifacts/host-actions-e2e.json.

tests/deploy/test_host_actions.py holds the same helper to hostile requests straight to its
socket and to another user; this test is the path through the console and the broker.
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from console.core.auditing import Action
from console.core.auditing.models import AuditEntry
from console.operations import services
from console.operations.models import HostAction
from inventory.models import Host
from tests.deploy.as_the_unit import UNIT_UID, unit_command
from tests.deploy.conftest import clean_env
from tests.deploy.test_host_actions import HELPER, _fake
from tests.factories import DeploymentFactory, GpuFactory
from tests.isolated_broker import SHARED_QUEUES, IsolatedBroker
from tests.mock_nvml import CHECKOUT, VENDORED, MockNvml
from tests.processes import Processes, database_url_for_processes, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

HOST = "gpu-actions"


@pytest.fixture
def shipped_host(agent_venv, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the helper runs as root and the agent as another user: needs root")
    if os.uname().machine != "x86_64":
        pytest.skip("the vendored mock NVML is built for x86_64 Linux")
    host = Host.objects.create(name=HOST, collector=Host.Collector.NVML)
    # A folder the unit's user can reach: pytest's own temporary folders are root's alone.
    work = Path(tempfile.mkdtemp(prefix="host-actions-e2e-"))
    work.chmod(0o755)
    record = work / "ran.txt"
    socket_path = work / "host-actions.sock"
    config = work / "host-actions.toml"  # root's: the agent's user cannot change it
    config.write_text(
        f"""
allowed_users = [{UNIT_UID}]
log_file = "{work / "helper.log"}"
[programs]
systemctl = "{_fake(work / "systemctl", record)}"
docker = "{_fake(work / "docker", record)}"
[deployments."llama-70b"]
systemd = "vllm-llama70b.service"
engine = "vllm"
reload_env = "{work / "llama-70b.env"}"
[deployments."sglang-8b"]
docker = "sglang-8b"
engine = "sglang"
reload_env = "{work / "sglang-8b.env"}"
[mps."1"]
systemd = "nvidia-mps@1.service"
"""
    )
    config.chmod(0o644)
    helper = subprocess.Popen(
        [agent_venv / "bin" / "python", *HELPER, "--socket", socket_path, "serve",
         "--config", config],
        env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not socket_path.exists():
        assert helper.poll() is None and time.monotonic() < deadline, helper.stdout.read()
        time.sleep(0.05)
    (work / "nvml").mkdir(mode=0o755)
    mock = MockNvml(work / "nvml", (VENDORED / "example-config.yaml").read_text())
    secret = work / "agent.secret"
    secret.write_text(host.agent_secret)
    secret.chmod(0o400)
    state = work / "state"
    state.mkdir()
    command, unit_env, who = unit_command(agent_venv, work)
    # In the work folder, not pytest's: the unit's user must reach the folder broker's folder.
    broker = IsolatedBroker.for_test(work)
    folder = [broker.folder, *broker.folder.rglob("*")] if broker.folder else []
    for path in (secret, state, *folder):  # what the unit's user must own
        os.chown(path, UNIT_UID, UNIT_UID)
    broker.purge(*SHARED_QUEUES, f"host.{HOST}")
    client = json.dumps([command[-1], *HELPER, "--socket", str(socket_path)])[1:-1]
    actions = work / "actions.toml"  # the shipped example's shape, the helper's client
    actions.write_text(
        f"""
[deployments."llama-70b"]
restart = {{ argv = [{client}, "restart", "llama-70b"] }}
reload_with = {{ argv = [{client}, "reload_with", "llama-70b", "--kv-bytes", "{{kv_bytes}}"] }}
[deployments."sglang-8b"]
reload_with = {{ argv = [{client}, "reload_with", "sglang-8b",
                        "--mem-fraction", "{{mem_fraction}}"] }}
[deployments."qwen-32b"]
restart = {{ argv = [{client}, "restart", "qwen-32b"] }}
[host]
mps_restart = {{ argv = [{client}, "mps_restart", "--card", "{{card_index}}"] }}
"""
    )
    actions.chmod(0o644)
    processes = Processes({"DATABASE_URL": database_url_for_processes(), **broker.env}, tmp_path)
    processes.celery_worker("central", "celery")  # records the agent's signed outcomes
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
        "AGENT_ACTIONS_FILE": str(actions),
        "AGENT_KERNEL_LOG": "off",
        "AGENT_MPS": "off",
    }
    processes.start_program("agent", [*command, "-m", "inventory.agent"], agent_env, cwd=work)
    try:
        with broker.publishing():
            yield host, work, processes, who
    finally:
        processes.stop()
        helper.terminate()
        helper.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def _audit(action: HostAction) -> list[dict]:
    rows = AuditEntry.objects.filter(object_id=str(action.pk)).order_by("at", "pk")
    return [
        {
            "action": row.action,
            "actor": row.actor_name,
            **{k: row.after.get(k) for k in ("state", "reason_code", "detail", "exit_code")},
        }
        for row in rows
    ]


KV_BYTES = 32 * 2**30
# (name, action, the deployment's runtime name or None for the card, params, what ran)
ASKED = [
    ("restart", "restart", "llama-70b", {}, ["systemctl restart vllm-llama70b.service"]),
    ("reload vLLM", "reload_with", "llama-70b", {"kv_bytes": KV_BYTES},
     ["systemctl restart vllm-llama70b.service"]),
    ("reload SGLang", "reload_with", "sglang-8b", {"mem_fraction": 0.8},
     ["docker restart sglang-8b"]),
    ("MPS restart", "mps_restart", None, {"card_index": 1},
     ["systemctl restart nvidia-mps@1.service"]),
    ("unlisted", "restart", "qwen-32b", {}, []),
]  # fmt: skip


def test_console_to_the_unprivileged_agent_to_the_root_helper_and_back(shipped_host, personas):
    """Each of seed 002's kinds of host action (restart, the off-peak reload for vLLM and
    SGLang, MPS restart) runs its one fixed command; a deployment the helper does not list is
    refused; each with its audit rows."""
    host, work, processes, who = shipped_host
    assert "uid 65534" in who and "no new privileges" in who
    GpuFactory(host=host, index=1)

    def logs() -> str:
        return "\n".join(
            f"--- {name} ---\n{processes.log(name)[-3000:]}" for name in ("agent", "central")
        )

    runs, deployments = {}, {}
    for name, kind, runtime, params, ran in ASKED:
        deployment = None
        if runtime is not None:
            if runtime not in deployments:
                deployments[runtime] = DeploymentFactory(host=host, runtime_name=runtime)
            deployment = deployments[runtime]
        record = work / "ran.txt"
        before = record.read_text().splitlines() if record.exists() else []
        asked = services.do_request_action(
            acting_user=personas["oncall"], host=host, action=kind, deployment=deployment,
            params=params,
        )  # fmt: skip
        assert asked.state == HostAction.State.AWAITING_APPROVAL  # four eyes: not sent yet
        action = services.do_approve_action(asked, acting_user=personas["approver"])
        wait_for(
            lambda pk=action.pk: HostAction.objects.get(pk=pk).finished,
            timeout=120,
            what=f"the outcome of {name} back at the console",
            logs=logs,
        )
        action.refresh_from_db()
        after = record.read_text().splitlines() if record.exists() else []
        runs[name] = {
            "state": action.state,
            "reason_code": action.reason_code,
            "detail": action.detail,
            "ran": after[len(before) :],
            "audit": _audit(action),
        }
        assert [row["action"] for row in runs[name]["audit"]] == [
            Action.HOST_ACTION_REQUEST, Action.HOST_ACTION_APPROVE, Action.HOST_ACTION_SEND,
            Action.HOST_ACTION_OUTCOME,
        ], runs[name]  # fmt: skip
        # Exactly the one fixed command, run by the root helper; nothing for the unlisted one.
        assert runs[name]["ran"] == ran, runs[name]
        if ran:
            assert (runs[name]["state"], runs[name]["audit"][-1]["state"]) == (
                "succeeded", "succeeded"
            ), runs[name]  # fmt: skip

    refused = runs["unlisted"]
    assert (refused["state"], refused["reason_code"]) == ("refused", "host_refused"), refused
    assert refused["detail"] == "refused: this host's helper lists no deployment 'qwen-32b'"
    assert refused["audit"][-1]["reason_code"] == "host_refused"
    # The reloads wrote each engine's own flag where its unit and container read it.
    assert (work / "llama-70b.env").read_text() == (
        f"GPU_CONSOLE_ENGINE_ARGS=--kv-cache-memory-bytes={KV_BYTES}\n"
    )
    assert (work / "sglang-8b.env").read_text() == (
        "GPU_CONSOLE_ENGINE_ARGS=--mem-fraction-static=0.8000\n"
    )
    # Every request came from the agent's user: the helper's peer, by SO_PEERCRED.
    logged = [json.loads(line) for line in (work / "helper.log").read_text().splitlines()]
    assert [(entry["state"], entry["peer_uid"]) for entry in logged] == [
        *[("succeeded", UNIT_UID)] * 4, ("refused", UNIT_UID)
    ]  # fmt: skip
    artifacts = CHECKOUT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "host-actions-e2e.json").write_text(
        json.dumps({"agent": who, "runs": runs, "helper_log": logged}, indent=2, default=str)
    )
