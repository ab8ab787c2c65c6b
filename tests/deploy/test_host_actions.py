"""Host actions on a host, as shipped: the installed agent, as the unit's user (uid 65534, no
capabilities, no new privileges), asks the root helper (`gpu-console-host-action serve`, run
here as root on its own socket) through the client its actions file names. An action the
helper's root-owned file lists runs (fake systemctl and docker on the helper's `[programs]`,
recording their argv); one it does not list is refused with its reason, and so is every peer
but the agent's user. The console's audit rows show both outcomes; the run is written to
test-artifacts/host-actions-as-the-agent.json.
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
from console.operations import messages, services
from inventory.wire import signing
from tests.deploy.as_the_unit import UNIT_UID, unit_command
from tests.deploy.conftest import clean_env
from tests.factories import DeploymentFactory, HostFactory

pytestmark = pytest.mark.django_db

CHECKOUT = Path(__file__).resolve().parents[2]
HELPER = ["-m", "inventory.agent.host_action_helper"]
# The agent's own code, as its Celery task runs it (inventory.agent.app): one signed request.
AGENT = """
import json, os, sys
from inventory.agent.actions import ActionRunner, DoneRequests, read_actions
runner = ActionRunner(read_actions(sys.argv[1]), {os.environ["HOST"]: os.environ["SECRET"]}.get,
                      DoneRequests(None), lambda outcome: None)
body, signature = json.load(sys.stdin)
print(json.dumps({"uid": os.getuid(), "outcome": runner.handle(body, signature)}))
"""


def _fake(path: Path, record: Path) -> str:
    path.write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> "{record}"\n')
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def host_with_helper(agent_venv):
    if os.geteuid() != 0:
        pytest.skip("the helper runs as root and the agent as another user: needs root")
    # A folder the unit's user can reach: pytest's own temporary folders are root's alone.
    work = Path(tempfile.mkdtemp(prefix="host-actions-"))
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
    command, unit_env, who = unit_command(agent_venv, work)
    yield work, socket_path, command, unit_env, who
    helper.terminate()
    helper.wait(10)
    shutil.rmtree(work, ignore_errors=True)


def _agent_actions(work: Path, socket_path: Path, python: str) -> Path:
    """The agent's allow-list: both deployments go to the helper, which knows one."""
    client = json.dumps([python, *HELPER, "--socket", str(socket_path)])[1:-1]
    actions = work / "actions.toml"
    actions.write_text(
        f"""
[deployments."llama-70b"]
restart = {{ argv = [{client}, "restart", "llama-70b"] }}
[deployments."qwen-32b"]
restart = {{ argv = [{client}, "restart", "qwen-32b"] }}
"""
    )
    actions.chmod(0o644)
    return actions


def _as_the_agent(command, unit_env, actions, host, action) -> dict:
    body = messages.request_body(action)
    ran = subprocess.run(
        [*command, "-c", AGENT, actions],
        input=json.dumps([body, signing.sign(host.agent_secret, body.encode())]),
        env=clean_env(**unit_env, HOST=host.name, SECRET=host.agent_secret),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def _asked_and_approved(personas, host, deployment):
    asked = services.do_request_action(
        acting_user=personas["oncall"], host=host, action="restart", deployment=deployment
    )
    return services.do_approve_action(asked, acting_user=personas["approver"])


def test_the_agent_runs_what_the_helper_lists_and_is_refused_the_rest(personas, host_with_helper):
    work, socket_path, command, unit_env, who = host_with_helper
    host = HostFactory(name="gpu-07")
    listed = DeploymentFactory(host=host, runtime_name="llama-70b")
    unlisted = DeploymentFactory(host=host, runtime_name="qwen-32b")
    actions = _agent_actions(work, socket_path, command[-1])
    runs = {}
    for name, deployment in (("allowed", listed), ("refused", unlisted)):
        action = _asked_and_approved(personas, host, deployment)
        ran = _as_the_agent(command, unit_env, actions, host, action)
        assert ran["uid"] == (UNIT_UID if os.geteuid() == 0 else os.geteuid())
        recorded = services.do_record_outcome(ran["outcome"])
        audit = AuditEntry.objects.filter(object_id=str(action.pk)).order_by("at", "pk")
        runs[name] = {
            "outcome": ran["outcome"],
            "audit": [
                {
                    "action": row.action,
                    "actor": row.actor_name,
                    **{
                        key: row.after[key]
                        for key in ("state", "reason_code", "detail", "exit_code")
                    },
                }
                for row in audit
            ],
        }
        assert [row.action for row in audit] == [
            Action.HOST_ACTION_REQUEST, Action.HOST_ACTION_APPROVE, Action.HOST_ACTION_SEND,
            Action.HOST_ACTION_OUTCOME,
        ]  # fmt: skip
        runs[name]["state"] = recorded.state
    # The listed one ran exactly the one fixed command, as root, through the helper.
    assert runs["allowed"]["state"] == "succeeded"
    assert (work / "ran.txt").read_text() == "systemctl restart vllm-llama70b.service\n"
    # The other never reached a program: refused by the helper, its reason in the trail.
    refused = runs["refused"]["outcome"]
    assert runs["refused"]["state"] == "refused"
    assert refused["reason_code"] == "host_refused"
    assert refused["detail"] == "refused: this host's helper lists no deployment 'qwen-32b'"
    assert runs["refused"]["audit"][-1]["reason_code"] == "host_refused"
    logged = [json.loads(line) for line in (work / "helper.log").read_text().splitlines()]
    assert [(entry["state"], entry["peer_uid"]) for entry in logged] == [
        ("succeeded", UNIT_UID), ("refused", UNIT_UID)
    ]  # fmt: skip
    artifacts = CHECKOUT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "host-actions-as-the-agent.json").write_text(
        json.dumps({"agent": who, "runs": runs, "helper_log": logged}, indent=2, default=str)
    )


@pytest.mark.parametrize(
    "request_",
    [
        {"action": "restart", "deployment": "../../etc/passwd"},
        {"action": "restart", "deployment": "llama-70b; reboot"},
        {"action": "restart", "deployment": "llama-70b", "argv": ["/bin/sh"]},
        {"action": "reboot", "deployment": "llama-70b"},
        {"action": "reload_with", "deployment": "llama-70b", "params": {"kv_bytes": "1 && id"}},
        {"action": "mps_restart", "params": {"card_index": 0}},  # no daemon listed
    ],
)
def test_hostile_requests_straight_to_the_socket_are_refused(host_with_helper, request_):
    work, socket_path, command, unit_env, _ = host_with_helper
    ask = (
        "import json, socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]);"
        "s.sendall(sys.argv[2].encode() + b'\\n'); print(s.makefile().readline())"
    )
    ran = subprocess.run(
        [*command, "-c", ask, socket_path, json.dumps(request_)],
        env=clean_env(**unit_env), capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    answer = json.loads(ran.stdout)
    assert (answer["state"], answer["exit_code"]) == ("refused", 77)
    assert not (work / "ran.txt").exists()


def test_a_user_the_helper_does_not_name_is_refused(host_with_helper, agent_venv):
    work, socket_path, command, unit_env, _ = host_with_helper
    other = [part.replace(f"={UNIT_UID}", "=65533") for part in command]
    ran = subprocess.run(
        [*other, *HELPER, "--socket", socket_path, "restart", "llama-70b"],
        env=clean_env(**unit_env), capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert ran.returncode == 77
    assert ran.stdout.strip() == "refused: uid 65533 is not one of this helper's allowed_users"
    assert not (work / "ran.txt").exists()


def test_the_wheel_installs_the_client_the_actions_file_names(agent_venv):
    ran = subprocess.run(
        [agent_venv / "bin" / "gpu-console-host-action", "--help"],
        env=clean_env(), capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "{serve,restart,stop,start,reload_with,mps_restart}" in ran.stdout
