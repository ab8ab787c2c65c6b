"""Host actions for engines in pods the whole way, as deploy/kubernetes ships them: the console
approves them; they go through the broker to the installed agent (`python -m inventory.agent`
on NVIDIA's mock NVML) run as its DaemonSet's pod runs it (uid 0, every capability dropped, no
new privileges: setpriv) on its ConfigMap's actions.toml; the agent hands each to the helper,
started by its own DaemonSet's command on its ConfigMap's host-actions.toml for node
gpu-node-3 (NODE_NAME, as the downward API sets it), kubectl a fake that records its argv and
lists pods.json's pods of the node it is asked for; the outcome goes back, signed, through the
broker to the console's worker. A restart and a vLLM reload of a deployment with its pod on
the node run their kubectl commands after the node's pod listing; an SGLang reload of a
deployment whose pod is on another node is refused by the helper by name; an MPS restart by the
agent's file. Each with its four audit rows; written to
test-artifacts/kubernetes-host-actions-e2e.json.

tests/deploy/test_kubernetes_host_actions.py holds the same helper and agent without the console
and the broker (and to hostile requests straight to the socket).
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from console.core.auditing import Action
from console.operations import services
from console.operations.models import HostAction
from inventory.models import Host
from tests.deploy.test_host_actions_e2e import _audit
from tests.deploy.test_kubernetes_host_actions import (
    AS_THE_POD,
    HOST,
    KUBECONFIG,
    _pod,
    shipped_node,
)
from tests.factories import DeploymentFactory, GpuFactory
from tests.mock_nvml import CHECKOUT, VENDORED, MockNvml
from tests.processes import Processes, database_url_for_processes, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def shipped_pod(agent_venv, tmp_path, isolated_broker):
    if os.geteuid() != 0:
        pytest.skip("the agent's pod runs as uid 0 without capabilities: setpriv needs root")
    if os.uname().machine != "x86_64":
        pytest.skip("the vendored mock NVML is built for x86_64 Linux")
    host = Host.objects.create(name=HOST, collector=Host.Collector.NVML)
    with shipped_node(agent_venv) as node:
        # the SGLang deployment's pod runs on another node: this node's helper will not act
        node["pods"].write_text(
            json.dumps([_pod("vllm-mistral", HOST), _pod("sglang-qwen32b", "gpu-node-9")])
        )
        work = Path(tempfile.mkdtemp(prefix="k8s-e2e-"))
        (work / "nvml").mkdir()
        mock = MockNvml(work / "nvml", (VENDORED / "example-config.yaml").read_text())
        secret = work / "agent.secret"
        secret.write_text(host.agent_secret)
        secret.chmod(0o400)
        (work / "state").mkdir()
        broker = isolated_broker
        broker.purge(f"host.{HOST}")
        processes = Processes(
            {"DATABASE_URL": database_url_for_processes(), **broker.env}, tmp_path
        )
        processes.celery_worker("central", "celery")  # records the agent's signed outcomes
        agent_env = {
            "PATH": os.environ["PATH"],
            "HOME": str(work),
            "LANG": "C.UTF-8",
            "INGEST_QUEUE_NAME": os.environ.get("INGEST_QUEUE_NAME", "ingest"),
            "CELERY_BROKER_URL": broker.url if broker.folder is None else "filesystem://",
            **broker.env,
            **mock.env,
            "AGENT_SOURCE": "nvml",
            "AGENT_HOST": HOST,
            "AGENT_SECRET_FILE": str(secret),
            "AGENT_STATE_DIR": str(work / "state"),
            "AGENT_ACTIONS_FILE": str(node["actions"]),
            "AGENT_KERNEL_LOG": "off",
            "AGENT_MPS": "off",
        }
        command = [*AS_THE_POD, node["python"], "-m", "inventory.agent"]
        processes.start_program("agent", command, agent_env, cwd=work)
        try:
            with broker.publishing():
                yield host, node, processes
        finally:
            processes.stop()
            shutil.rmtree(work, ignore_errors=True)


KV_BYTES = 16 * 2**30
KUBECTL = ["--kubeconfig", KUBECONFIG, "--namespace", "inference"]
LISTED = [*KUBECTL, "get", "pods", "--field-selector", f"spec.nodeName={HOST}", "--output", "json"]
# (name, action, the deployment's runtime name or None for the card, params, kubectl argv run)
ASKED = [
    ("restart", "restart", "mistral-7b", {},
     [LISTED, [*KUBECTL, "rollout", "restart", "deployment/vllm-mistral"]]),
    ("reload vLLM", "reload_with", "mistral-7b", {"kv_bytes": KV_BYTES},
     [LISTED, [*KUBECTL, "set", "env", "deployment/vllm-mistral",
               f"GPU_CONSOLE_ENGINE_ARGS=--kv-cache-memory-bytes={KV_BYTES}"]]),
    ("another node's", "reload_with", "qwen-32b", {"mem_fraction": 0.8}, [LISTED]),
    ("MPS restart", "mps_restart", None, {"card_index": 0}, []),
]  # fmt: skip


def test_console_to_the_agents_pod_to_the_node_scoped_helper_and_back(shipped_pod, personas):
    host, node, processes = shipped_pod
    GpuFactory(host=host, index=0)

    def logs() -> str:
        return "\n".join(
            f"--- {name} ---\n{processes.log(name)[-3000:]}" for name in ("agent", "central")
        )

    def recorded() -> list[list[str]]:
        lines = node["record"].read_text().splitlines() if node["record"].exists() else []
        return [json.loads(line)[1:] for line in lines]

    runs, deployments = {}, {}
    for name, kind, runtime, params, ran in ASKED:
        deployment = None
        if runtime is not None:
            if runtime not in deployments:
                deployments[runtime] = DeploymentFactory(host=host, runtime_name=runtime)
            deployment = deployments[runtime]
        before = recorded()
        asked = services.do_request_action(
            acting_user=personas["oncall"], host=host, action=kind, deployment=deployment,
            params=params,
        )  # fmt: skip
        action = services.do_approve_action(asked, acting_user=personas["approver"])
        wait_for(
            lambda pk=action.pk: HostAction.objects.get(pk=pk).finished,
            timeout=120,
            what=f"the outcome of {name} back at the console",
            logs=logs,
        )
        action.refresh_from_db()
        runs[name] = {
            "state": action.state,
            "reason_code": action.reason_code,
            "detail": action.detail,
            "ran": recorded()[len(before) :],
            "audit": _audit(action),
        }
        assert [row["action"] for row in runs[name]["audit"]] == [
            Action.HOST_ACTION_REQUEST, Action.HOST_ACTION_APPROVE, Action.HOST_ACTION_SEND,
            Action.HOST_ACTION_OUTCOME,
        ], runs[name]  # fmt: skip
        assert runs[name]["ran"] == ran, runs[name]

    for name in ("restart", "reload vLLM"):
        assert (runs[name]["state"], runs[name]["audit"][-1]["state"]) == (
            "succeeded", "succeeded"), runs[name]  # fmt: skip
    elsewhere = runs["another node's"]
    assert (elsewhere["state"], elsewhere["reason_code"]) == ("refused", "host_refused")
    assert elsewhere["detail"] == (
        "refused: qwen-32b (inference/sglang-qwen32b) has no pod on node gpu-node-3: this "
        "helper acts only on its own node's deployments"
    ), elsewhere
    assert elsewhere["audit"][-1]["reason_code"] == "host_refused"
    mps = runs["MPS restart"]
    assert (mps["state"], mps["reason_code"]) == ("refused", "not_allowed"), mps
    # every request the helper saw came from the agent's pod (uid 0), by SO_PEERCRED
    logged = [json.loads(line) for line in (node["work"] / "helper.log").read_text().splitlines()]
    assert [(e["state"], e["peer_uid"], e["request"]["deployment"]) for e in logged] == [
        ("succeeded", 0, "mistral-7b"), ("succeeded", 0, "mistral-7b"),
        ("refused", 0, "qwen-32b")]  # fmt: skip
    artifacts = CHECKOUT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "kubernetes-host-actions-e2e.json").write_text(
        json.dumps({"runs": runs, "helper_log": logged}, indent=2, default=str)
    )
