"""The root helper's allow-list: what each listed action comes to (fixed argument lists of
absolute programs), and what it refuses; the MPS restart run against the fake control binary."""

import json
import os
import socket
import sys
from pathlib import Path

import pytest

from inventory.agent.actions import parse_actions
from inventory.agent.host_action_helper import (
    ConfigError,
    Refused,
    handle,
    parse_config,
    plan,
    run_plan,
)

CONFIG = """
allowed_users = ["root"]
[deployments."llama-70b"]
systemd = "vllm-llama70b.service"
engine = "vllm"
reload_env = "/etc/inference/llama-70b.env"
[deployments."qwen-32b"]
docker = "sglang-qwen32b"
engine = "sglang"
reload_env = "/etc/inference/qwen-32b.env"
[deployments."mistral"]
kubernetes = "inference/vllm-mistral"
kubeconfig = "/etc/gpu-console/kubeconfig"
replicas = 2
engine = "vllm"
[mps."0"]
pipe_directory = "/tmp/nvidia-mps-0"
log_directory = "/var/log/nvidia-mps-0"
[mps."1"]
systemd = "nvidia-mps@1.service"
"""
CLIENT = "/opt/gpu-console-agent/bin/gpu-console-host-action"
KUBECTL = ("/usr/bin/kubectl", "--kubeconfig", "/etc/gpu-console/kubeconfig",
           "--namespace", "inference")  # fmt: skip


def _argv(request, config=CONFIG):
    return [step.argv for step in plan(parse_config(config), request).steps]


@pytest.mark.parametrize(
    ("request_", "argv"),
    [
        ({"action": "restart", "deployment": "llama-70b"},
         [("/usr/bin/systemctl", "restart", "vllm-llama70b.service")]),
        ({"action": "stop", "deployment": "qwen-32b"},
         [("/usr/bin/docker", "stop", "sglang-qwen32b")]),
        ({"action": "restart", "deployment": "mistral"},
         [(*KUBECTL, "rollout", "restart", "deployment/vllm-mistral")]),
        ({"action": "stop", "deployment": "mistral"},
         [(*KUBECTL, "scale", "deployment/vllm-mistral", "--replicas=0")]),
        ({"action": "start", "deployment": "mistral"},
         [(*KUBECTL, "scale", "deployment/vllm-mistral", "--replicas=2")]),
        ({"action": "reload_with", "deployment": "mistral", "params": {"mem_fraction": 0.9}},
         [(*KUBECTL, "set", "env", "deployment/vllm-mistral",
           "GPU_CONSOLE_ENGINE_ARGS=--gpu-memory-utilization=0.9000")]),
        ({"action": "mps_restart", "params": {"card_index": 1}},
         [("/usr/bin/systemctl", "restart", "nvidia-mps@1.service")]),
        ({"action": "mps_restart", "params": {"card_index": 0}},
         [("/usr/bin/nvidia-cuda-mps-control",), ("/usr/bin/nvidia-cuda-mps-control", "-d")]),
    ],
)  # fmt: skip
def test_each_listed_action_is_fixed_argument_lists(request_, argv):
    assert _argv(request_) == argv


def test_a_reload_writes_the_engine_flag_then_restarts():
    reload = plan(parse_config(CONFIG), {"action": "reload_with", "deployment": "llama-70b",
                                         "params": {"kv_bytes": 8 * 1024**3}})  # fmt: skip
    assert reload.write == (
        Path("/etc/inference/llama-70b.env"),
        f"GPU_CONSOLE_ENGINE_ARGS=--kv-cache-memory-bytes={8 * 1024**3}\n",
    )
    assert [step.argv for step in reload.steps] == [
        ("/usr/bin/systemctl", "restart", "vllm-llama70b.service")
    ]


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        ({"action": "restart", "deployment": "gemma"}, "lists no deployment 'gemma'"),
        ({"action": "restart", "deployment": "../llama-70b"}, "needs a deployment's runtime name"),
        ({"action": "restart", "deployment": "llama-70b", "argv": ["/bin/sh"]}, "a request is"),
        ({"action": "restart", "deployment": "llama-70b", "params": {"unit": "x"}}, "unknown"),
        ({"action": "reload_with", "deployment": "qwen-32b", "params": {"kv_bytes": 1}},
         "does not reload kv_bytes"),
        ({"action": "reload_with", "deployment": "llama-70b", "params": {"kv_bytes": "1;id"}},
         "kv_bytes must be"),
        ({"action": "mps_restart", "params": {"card_index": 2}}, "no MPS daemon for card 2"),
        ({"action": "shell", "deployment": "llama-70b"}, "unknown action"),
    ],
)  # fmt: skip
def test_what_the_list_does_not_name_is_refused_with_its_reason(request_, reason):
    with pytest.raises(Refused, match=reason.replace("(", r"\(")):
        plan(parse_config(CONFIG), request_)


def test_a_helper_with_no_mps_daemon_refuses_mps_restart_by_name():
    """Kubernetes nodes (deploy/kubernetes/host-actions.yaml): the device plugin owns MPS."""
    config = parse_config('allowed_users = ["root"]\n')
    with pytest.raises(Refused, match=r"^mps_restart is not offered by this helper: it lists no"):
        plan(config, {"action": "mps_restart", "params": {"card_index": 0}})


@pytest.mark.parametrize(
    "text",
    [
        'allowed_users = ["root"]\n[deployments."x"]\nsystemd = "x.service; reboot"',
        'allowed_users = ["root"]\n[deployments."x"]\ndocker = "../x"',
        'allowed_users = ["root"]\n[deployments."x"]\nsystemd = "x.service"\ndocker = "x"',
        'allowed_users = ["root"]\n[deployments."x"]\nsystemd = "x.service"\nengine = "vllm"',
        'allowed_users = ["root"]\n[programs]\nsystemctl = "systemctl"',
        'allowed_users = ["root"]\n[programs]\nsh = "/bin/sh"',
        'allowed_users = ["root"]\n[mps."0"]\npipe_directory = "/tmp/../etc"',
        'allowed_users = ["no-such-user-here"]',
        "[deployments]",
    ],
)
def test_a_helper_file_that_could_run_anything_else_stops_the_helper(text):
    with pytest.raises(ConfigError):
        parse_config(text)


def _control(tmp_path, exit_codes="{}"):
    """A control binary recording each run, exiting as `exit_codes` says per argv."""
    record = tmp_path / "ran.jsonl"
    control = tmp_path / "nvidia-cuda-mps-control"
    control.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"print(json.dumps({{'argv': sys.argv[1:], 'stdin': sys.stdin.read(),"
        f" 'pipe': os.environ['CUDA_MPS_PIPE_DIRECTORY'],"
        f" 'devices': os.environ.get('CUDA_VISIBLE_DEVICES')}}), file=open({str(record)!r}, 'a'))\n"
        f"sys.exit({exit_codes}.get(' '.join(sys.argv[1:]), 0))\n"
    )
    control.chmod(0o755)
    config = parse_config(
        f'allowed_users = ["root"]\n[programs]\nnvidia-cuda-mps-control = "{control}"\n'
        f'[mps."3"]\npipe_directory = "{tmp_path}/mps-3"\n'
    )
    answer = run_plan(config, plan(config, {"action": "mps_restart", "params": {"card_index": 3}}))
    return answer, [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.parametrize("quit_status", [0, 1])  # 1: the daemon was gone already
def test_an_mps_restart_stops_the_cards_daemon_and_starts_it_again(tmp_path, quit_status):
    """`quit` on the card's pipe directory, then `-d` with that directory and the card alone
    visible."""
    answer, runs = _control(tmp_path, f"{{'': {quit_status}}}")
    assert answer["state"] == "succeeded"
    assert runs == [
        {"argv": [], "stdin": "quit\n", "pipe": f"{tmp_path}/mps-3", "devices": None},
        {"argv": ["-d"], "stdin": "", "pipe": f"{tmp_path}/mps-3", "devices": "3"},
    ]


def test_a_daemon_that_will_not_start_is_retried_then_reported(tmp_path, monkeypatch):
    monkeypatch.setattr("inventory.agent.host_action_helper.MPS_START_RETRY_S", 1.2)
    answer, runs = _control(tmp_path, "{'-d': 3}")
    assert (answer["state"], answer["exit_code"]) == ("failed", 3)
    assert [run["argv"] for run in runs][:3] == [[], ["-d"], ["-d"]]


def test_the_shipped_examples_ask_the_helper_only_for_what_it_lists():
    deploy = Path(__file__).resolve().parents[3] / "deploy" / "host-actions"
    helper = parse_config((deploy / "host-actions.toml").read_text().replace("gpu-agent", "root"))
    agent = parse_actions((deploy / "actions.toml").read_text())
    values = {"--kv-bytes": ("kv_bytes", 2**30), "--mem-fraction": ("mem_fraction", 0.8)}
    for name, actions in agent.deployments.items():
        for action, command in actions.items():
            client, asked, deployment, *flag = command.argv
            assert (client, asked, deployment) == (CLIENT, action, name)
            params = dict([values[flag[0]]]) if flag else {}
            assert plan(helper, {"action": action, "deployment": name, "params": params}).steps
    mps = agent.host["mps_restart"].render({"card_index": 1})
    assert mps == [CLIENT, "mps_restart", "--card", "1"]
    assert plan(helper, {"action": "mps_restart", "params": {"card_index": 1}}).steps


# ---- Kubernetes: a helper scoped to its node ---------------------------------------------


def _pod(deployment: str, node: str, template_hash: str = "5d8f7c") -> dict:
    """A pod as `kubectl get pods -o json` lists it: its ReplicaSet is the deployment's."""
    return {"metadata": {"name": f"{deployment}-{template_hash}-x1", "namespace": "inference",
                         "labels": {"pod-template-hash": template_hash},
                         "ownerReferences": [{"kind": "ReplicaSet",
                                              "name": f"{deployment}-{template_hash}"}]},
            "spec": {"nodeName": node}}  # fmt: skip


@pytest.fixture
def scoped(tmp_path):
    """A helper on node gpu-node-3 with a fake kubectl: `get pods` answers the pods of
    pods.json on the node its field selector names; every run is recorded."""
    record, pods = tmp_path / "kubectl.jsonl", tmp_path / "pods.json"
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(record)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "if 'get' in sys.argv:\n"
        "    node = sys.argv[sys.argv.index('--field-selector') + 1].split('=', 1)[1]\n"
        f"    items = json.load(open({str(pods)!r}))\n"
        "    if items == 'down': sys.exit('The connection to the server was refused')\n"
        "    print(json.dumps({'kind': 'PodList', 'items': "
        "[p for p in items if p['spec']['nodeName'] == node]}))\n"
    )
    kubectl.chmod(0o755)
    text = (
        f"allowed_users = [{os.getuid()}]\n"
        f'node_name_env = "NODE_NAME"\nstopped_file = "{tmp_path}/stopped-here.json"\n'
        f'log_file = "{tmp_path}/helper.log"\n[programs]\nkubectl = "{kubectl}"\n'
        '[deployments."mistral"]\nkubernetes = "inference/vllm-mistral"\nengine = "vllm"\n'
        '[deployments."qwen"]\nkubernetes = "inference/sglang-qwen32b"\nengine = "sglang"\n'
    )
    pods.write_text(json.dumps([_pod("vllm-mistral", "gpu-node-3"),
                                _pod("sglang-qwen32b", "gpu-node-9")]))  # fmt: skip

    def ask(action, deployment, config=None):
        config = config or state["config"]
        mine, theirs = socket.socketpair()
        with mine, theirs:
            mine.sendall(json.dumps({"action": action, "deployment": deployment}).encode() + b"\n")
            return handle(config, theirs)

    def ran():
        lines = record.read_text().splitlines() if record.exists() else []
        record.unlink(missing_ok=True)
        return [json.loads(line) for line in lines]

    state = {"config": parse_config(text, {"NODE_NAME": "gpu-node-3"})}
    return {"ask": ask, "ran": ran, "pods": pods, "text": text, "state": state,
            "log": tmp_path / "helper.log", "kubectl": str(kubectl)}  # fmt: skip


def test_a_node_scoped_helper_acts_only_on_deployments_with_a_pod_on_its_node(scoped):
    ask, ran = scoped["ask"], scoped["ran"]
    check = ["--namespace", "inference", "get", "pods", "--field-selector",
             "spec.nodeName=gpu-node-3", "--output", "json"]  # fmt: skip
    assert ask("restart", "mistral")["state"] == "succeeded"
    assert ran() == [check, ["--namespace", "inference", "rollout", "restart",
                             "deployment/vllm-mistral"]]  # fmt: skip
    refused = ask("restart", "qwen")  # its pod is on gpu-node-9
    assert (refused["state"], refused["exit_code"]) == ("refused", 77)
    assert refused["reason"] == (
        "qwen (inference/sglang-qwen32b) has no pod on node gpu-node-3: this helper acts only "
        "on its own node's deployments"
    )
    assert ran() == [check], "listed, never acted on"
    logged = [json.loads(line) for line in scoped["log"].read_text().splitlines()]
    assert [(e["state"], e["peer_uid"], e["request"]["deployment"]) for e in logged] == [
        ("succeeded", os.getuid(), "mistral"), ("refused", os.getuid(), "qwen")]  # fmt: skip
    assert logged[1]["checked"] == [scoped["kubectl"], *check] and logged[1]["argv"] == []
    # a pod named like the deployment but of another owner (a bare pod, a StatefulSet) is not it
    scoped["pods"].write_text(json.dumps([{**_pod("vllm-mistral", "gpu-node-3"), "metadata": {
        "name": "vllm-mistral-0", "labels": {}, "ownerReferences": [
            {"kind": "StatefulSet", "name": "vllm-mistral"}]}}]))  # fmt: skip
    assert ask("restart", "mistral")["state"] == "refused"


def test_a_node_scoped_helper_starts_again_what_it_stopped_and_nothing_else(scoped, tmp_path):
    ask, ran = scoped["ask"], scoped["ran"]
    assert ask("stop", "mistral")["state"] == "succeeded"
    scoped["pods"].write_text("[]")  # scaled to 0: no pod left anywhere
    assert ask("restart", "mistral")["state"] == "refused"
    assert ask("start", "qwen")["state"] == "refused", "stopped by no one here"
    # the record survives the helper's restart (the node folder)
    again = parse_config(scoped["text"], {"NODE_NAME": "gpu-node-3"})
    assert json.loads((tmp_path / "stopped-here.json").read_text()) == ["mistral"]
    ran()
    assert ask("start", "mistral", again)["state"] == "succeeded"
    assert ran()[-1][-2:] == ["deployment/vllm-mistral", "--replicas=1"]
    assert ask("start", "mistral", again)["state"] == "refused", "started: the record is gone"


def test_a_node_scoped_helper_that_cannot_list_its_pods_fails_and_runs_nothing(scoped):
    scoped["pods"].write_text('"down"')
    answer = scoped["ask"]("restart", "mistral")
    assert answer["state"] == "failed" and answer["exit_code"] == 1
    assert answer["reason"].startswith("cannot list the pods of node gpu-node-3 (")
    assert "The connection to the server was refused" in answer["reason"]
    assert len(scoped["ran"]()) == 1, "only the list"


@pytest.mark.parametrize("environ", [{}, {"NODE_NAME": ""}, {"NODE_NAME": "a b"}])
def test_a_node_scoped_helper_without_its_node_name_does_not_start(scoped, environ):
    with pytest.raises(ConfigError, match=r"^node_name_env: \$NODE_NAME holds no node name"):
        parse_config(scoped["text"], environ)
