"""Host actions for engines in pods, as deploy/kubernetes ships them: the helper started by its
DaemonSet's own command on its ConfigMap's host-actions.toml (kubectl a fake that records its
argv), and the installed agent as its pod runs it (uid 0 with no capability and no new
privileges: setpriv) on its ConfigMap's actions.toml, over the socket both pods share. An
allowed request comes to exactly the expected kubectl argv; a deployment or an action the
files do not list is refused, its reason in the agent's outcome and the helper's log.
"""

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

from inventory.telemetry import host_actions as ha
from inventory.wire import signing
from tests.deploy.as_the_unit import unit_command
from tests.deploy.conftest import clean_env

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
HOST, SECRET = "gpu-node-3", "node-3-secret"
KUBECONFIG = "/etc/gpu-console-host-actions/kubeconfig"
# The agent's pod: uid 0, every capability dropped, allowPrivilegeEscalation: false.
AS_THE_POD = ["setpriv", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
              "--no-new-privs", "--"]  # fmt: skip
# The agent's own code, as its Celery task runs it (inventory.agent.app), for each request.
AGENT = """
import json, os, sys
from inventory.agent.actions import ActionRunner, DoneRequests, read_actions
runner = ActionRunner(read_actions(sys.argv[1]), {os.environ["HOST"]: os.environ["SECRET"]}.get,
                      DoneRequests(None), lambda outcome: None)
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")][0]
outcomes = [runner.handle(body, signature) for body, signature in json.load(sys.stdin)]
print(json.dumps({"uid": os.getuid(), "cap_eff": caps, "outcomes": outcomes}))
"""


def _manifest(name: str) -> dict:
    return {
        (d["kind"], d["metadata"]["name"]): d
        for d in yaml.safe_load_all((MANIFESTS / name).read_text())
        if d
    }


@pytest.fixture
def node(agent_venv):
    if os.geteuid() != 0:
        pytest.skip("the agent's pod runs as uid 0 without capabilities: setpriv needs root")
    with shipped_node(agent_venv) as started:
        yield started


@contextlib.contextmanager
def shipped_node(agent_venv):
    """The helper as its DaemonSet starts it on node HOST (NODE_NAME), on its ConfigMap's file
    with a fake kubectl, and the agent's ConfigMap's actions.toml pointing at its socket."""
    helper_yaml, agent_yaml = _manifest("host-actions.yaml"), _manifest("agent.yaml")
    work = Path(tempfile.mkdtemp(prefix="k8s-host-actions-"))
    work.chmod(0o755)  # the other uid below reaches the socket
    record, socket_path = work / "kubectl.jsonl", work / "socket"
    kubectl = work / "kubectl"
    # kubectl: records its argv; `get pods` answers pods.json's pods on the selector's node
    pods = work / "pods.json"
    pods.write_text(json.dumps([_pod("vllm-mistral", HOST), _pod("sglang-qwen32b", HOST)]))
    kubectl.write_text(
        f"#!{agent_venv / 'bin' / 'python'}\nimport json, sys\n"
        f"open({str(record)!r}, 'a').write(json.dumps(sys.argv) + '\\n')\n"
        "if 'get' in sys.argv:\n"
        "    node = sys.argv[sys.argv.index('--field-selector') + 1].split('=', 1)[1]\n"
        f"    items = json.load(open({str(pods)!r}))\n"
        "    items = [p for p in items if p['spec']['nodeName'] == node]\n"
        "    print(json.dumps({'kind': 'PodList', 'items': items}))\n"
    )
    kubectl.chmod(0o755)
    shipped = helper_yaml[("ConfigMap", "gpu-console-host-actions")]["data"]["host-actions.toml"]
    assert '"/usr/local/bin/kubectl"' in shipped
    config = work / "host-actions.toml"
    config.write_text(
        f'log_file = "{work / "helper.log"}"\n'
        + shipped.replace('"/usr/local/bin/kubectl"', json.dumps(str(kubectl)))
    )
    # the DaemonSet's own command, its paths moved here
    pod = helper_yaml[("DaemonSet", "gpu-console-host-actions")]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = list(container["command"])
    command[0] = str(agent_venv / "bin" / "python")
    command[command.index("--socket") + 1] = str(socket_path)
    command[command.index("--config") + 1] = str(config)
    # NODE_NAME as the DaemonSet's downward API sets it
    env = {item["name"]: item for item in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    shipped_stopped = 'stopped_file = "/run/gpu-console-host-actions/stopped-here.json"'
    assert shipped_stopped in config.read_text()
    config.write_text(
        config.read_text().replace(shipped_stopped, f'stopped_file = "{work / "stopped.json"}"')
    )
    helper = subprocess.Popen(
        command, env=clean_env(NODE_NAME=HOST), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not socket_path.exists():
        assert helper.poll() is None and time.monotonic() < deadline, helper.stdout.read()
        time.sleep(0.05)
    client = str(agent_venv / "bin" / "gpu-console-host-action")
    shipped_actions = agent_yaml[("ConfigMap", "gpu-console-agent")]["data"]["actions.toml"]
    actions = work / "actions.toml"
    actions.write_text(
        shipped_actions.replace(
            '"/usr/local/bin/gpu-console-host-action"',
            f'"{client}", "--socket", "{socket_path}"',
        )
    )
    started = {"work": work, "record": record, "socket": socket_path, "actions": actions,
               "pods": pods, "client": client, "python": str(agent_venv / "bin" / "python"),
               "venv": agent_venv}  # fmt: skip
    try:
        yield started
    finally:
        helper.terminate()
        helper.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def _pod(deployment: str, node: str) -> dict:
    """A pod of the deployment (its ReplicaSet's) as `kubectl get pods -o json` lists it."""
    return {"metadata": {"name": f"{deployment}-7c9d-x", "labels": {"pod-template-hash": "7c9d"},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": f"{deployment}-7c9d"}]},
            "spec": {"nodeName": node}}  # fmt: skip


def _run_as_the_pod(node, requests) -> dict:
    ran = subprocess.run(
        [*AS_THE_POD, node["python"], "-c", AGENT, node["actions"]],
        input=json.dumps(requests), env=clean_env(HOST=HOST, SECRET=SECRET),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def _signed(action: str, deployment: str | None, params: dict) -> list[str]:
    request = ha.ActionRequest(
        id=str(uuid.uuid4()), host=HOST, action=action, deployment=deployment,
        params=params, expires_at=time.time() + 600,
    )  # fmt: skip
    body = signing.encode(request.as_message()).decode()
    return [body, signing.sign(SECRET, body.encode())]


def test_the_agents_pod_runs_the_listed_kubectl_commands_and_is_refused_the_rest(node):
    requests = [
        _signed("restart", "mistral-7b", {}),
        _signed("stop", "mistral-7b", {}),
        _signed("start", "mistral-7b", {}),
        _signed("reload_with", "mistral-7b", {"kv_bytes": 8 << 30}),
        _signed("reload_with", "qwen-32b", {"mem_fraction": 0.85}),
        _signed("mps_restart", None, {"card_index": 0}),
        _signed("restart", "llama-70b", {}),  # a deployment neither file lists
    ]
    agent = _run_as_the_pod(node, requests)
    assert (agent["uid"], int(agent["cap_eff"], 16)) == (0, 0), "uid 0, no capability"
    outcomes = agent["outcomes"]
    assert [o["state"] for o in outcomes] == ["succeeded"] * 5 + ["refused"] * 2
    assert [(o["reason_code"], o["detail"]) for o in outcomes[5:]] == [
        ("not_allowed", "the actions file does not allow mps_restart here"),
        ("not_allowed", "the actions file names no deployment 'llama-70b'"),
    ]
    kubectl = [str(node["work"] / "kubectl"), "--kubeconfig", KUBECONFIG, "--namespace"]
    recorded = [json.loads(line) for line in node["record"].read_text().splitlines()]
    check = [*kubectl, "inference", "get", "pods", "--field-selector",
             f"spec.nodeName={HOST}", "--output", "json"]  # fmt: skip
    assert recorded[0::2] == [check] * 5, "the node's pods listed before each action"
    ran_argv = recorded[1::2]
    assert ran_argv == [
        [*kubectl, "inference", "rollout", "restart", "deployment/vllm-mistral"],
        [*kubectl, "inference", "scale", "deployment/vllm-mistral", "--replicas=0"],
        [*kubectl, "inference", "scale", "deployment/vllm-mistral", "--replicas=1"],
        [*kubectl, "inference", "set", "env", "deployment/vllm-mistral",
         "GPU_CONSOLE_ENGINE_ARGS=--kv-cache-memory-bytes=8589934592"],
        [*kubectl, "inference", "set", "env", "deployment/sglang-qwen32b",
         "GPU_CONSOLE_ENGINE_ARGS=--mem-fraction-static=0.8500"],
    ]  # fmt: skip
    logged = [json.loads(line) for line in (node["work"] / "helper.log").read_text().splitlines()]
    assert [(e["state"], e["peer_uid"], e["argv"], e["checked"]) for e in logged] == [
        ("succeeded", 0, [argv], check) for argv in ran_argv
    ]


def test_another_nodes_deployment_is_refused_by_the_helper_by_name_and_logged(node):
    """Every node's agent holds the same actions.toml: the helper on gpu-node-3 refuses a
    deployment whose pods run elsewhere, whoever asks, before any kubectl that changes it."""
    node["pods"].write_text(json.dumps([_pod("vllm-mistral", HOST),
                                        _pod("sglang-qwen32b", "gpu-node-9")]))  # fmt: skip
    agent = _run_as_the_pod(node, [_signed("restart", "qwen-32b", {}),
                                   _signed("restart", "mistral-7b", {})])  # fmt: skip
    refused, allowed = agent["outcomes"]
    reason = ("qwen-32b (inference/sglang-qwen32b) has no pod on node gpu-node-3: this helper "
              "acts only on its own node's deployments")  # fmt: skip
    assert (refused["state"], refused["reason_code"]) == ("refused", "host_refused")
    assert refused["detail"].endswith(reason), refused["detail"]
    assert allowed["state"] == "succeeded"
    recorded = [json.loads(line)[4:] for line in node["record"].read_text().splitlines()]
    assert [argv[:3] for argv in recorded] == [
        ["inference", "get", "pods"], ["inference", "get", "pods"],
        ["inference", "rollout", "restart"]]  # fmt: skip
    logged = [json.loads(line) for line in (node["work"] / "helper.log").read_text().splitlines()]
    first = logged[0]
    assert (first["state"], first["peer_uid"], first["reason"], first["argv"]) == (
        "refused", 0, reason, [])  # fmt: skip


def test_the_helper_refuses_by_name_what_its_file_does_not_list(node):
    """Straight to the socket, past the agent's file: the helper decides again."""
    asked = {
        "llama-70b": ["restart", "llama-70b"],
        "mps": ["mps_restart", "--card", "0"],
    }
    answers = {}
    for key, args in asked.items():
        ran = subprocess.run(
            [*AS_THE_POD, node["client"], "--socket", node["socket"], *args],
            env=clean_env(), capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        answers[key] = (ran.returncode, ran.stdout.strip())
    # any other uid on the node (here the systemd unit's, 65534) is refused by its peer check
    command, unit_env, _ = unit_command(node["venv"], node["work"])
    ask = (
        "import json, socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]);"
        "s.sendall(sys.argv[2].encode() + b'\\n'); print(s.makefile().readline())"
    )
    other = subprocess.run(
        [*command, "-c", ask, node["socket"], '{"action": "restart", "deployment": "mistral-7b"}'],
        env=clean_env(**unit_env), capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert answers == {
        "llama-70b": (77, "refused: this host's helper lists no deployment 'llama-70b'"),
        "mps": (77, "refused: mps_restart is not offered by this helper: it lists no MPS daemon"),
    }
    assert json.loads(other.stdout)["reason"] == (
        "uid 65534 is not one of this helper's allowed_users"
    ), other.stderr
    assert not node["record"].exists(), "kubectl never ran"
    logged = [json.loads(line) for line in (node["work"] / "helper.log").read_text().splitlines()]
    assert [(e["state"], e["peer_uid"], e["reason"]) for e in logged] == [
        ("refused", 0, "this host's helper lists no deployment 'llama-70b'"),
        ("refused", 0, "mps_restart is not offered by this helper: it lists no MPS daemon"),
        ("refused", 65534, "uid 65534 is not one of this helper's allowed_users"),
    ]
