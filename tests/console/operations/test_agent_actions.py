"""The agent's side of host actions: the actions file, the checks, once-only runs."""

import json
import sys
import time
import uuid

import pytest

from inventory.agent.actions import (
    ActionRunner,
    ActionsFileError,
    DoneRequests,
    parse_actions,
)
from inventory.wire import signing

SECRET = "s3cret"
COUNTER_SCRIPT = "import sys; print(sys.argv[2], file=open(sys.argv[1], 'a'))"


def _table(tmp_path):
    counter = tmp_path / "runs.txt"
    return (
        parse_actions(
            f"""
[deployments."llama-70b"]
restart = {{ systemd = "vllm-llama70b.service" }}
stop = {{ container = "llama", runtime = "podman" }}
reload_with = {{ argv = ["{sys.executable}", "-c", "{COUNTER_SCRIPT}",
                         "{counter}", "kv={{kv_bytes}}"] }}

[host]
mps_restart = {{ argv = ["{sys.executable}", "-c", "import time; time.sleep(5)"], timeout_s = 1 }}
"""
        ),
        counter,
    )


def _signed(message, secret=SECRET):
    body = signing.encode(message).decode()
    return body, signing.sign(secret, body.encode())


def _request(action="reload_with", deployment="llama-70b", **params):
    return {
        "id": str(uuid.uuid4()),
        "host": "gpu-07",
        "action": action,
        "deployment": deployment,
        "params": params,
        "expires_at": time.time() + 60,
    }


def _runner(table, reports):
    return ActionRunner(table, {"gpu-07": SECRET}.get, DoneRequests(None), reports.append)


def test_systemd_and_container_actions_become_fixed_argument_lists(tmp_path):
    table, _ = _table(tmp_path)
    actions = table.deployments["llama-70b"]
    assert actions["restart"].argv == ("/usr/bin/systemctl", "restart", "vllm-llama70b.service")
    assert actions["stop"].argv == ("/usr/bin/podman", "stop", "llama")


@pytest.mark.parametrize(
    "text",
    [
        '[deployments."x"]\nrestart = { argv = ["sh", "-c", "reboot"] }',  # not an absolute path
        '[deployments."x"]\nreload_with = { systemd = "x.service" }',  # needs its parameter
        '[deployments."x"]\nrestart = { argv = ["/bin/echo", "{command}"] }',
        '[deployments."x"]\nreboot = { systemd = "x.service" }',
        '[deployments."x"]\nrestart = { systemd = "x.service; rm -rf /" }',
        "[shell]\nrun = 1",
    ],
)
def test_an_actions_file_that_could_run_anything_else_is_refused(text):
    with pytest.raises(ActionsFileError):
        parse_actions(text)


def test_without_an_actions_file_every_action_is_refused_and_says_so():
    reports = []
    outcome = _runner(None, reports).handle(*_signed(_request(kv_bytes=1024)))
    assert outcome["state"] == "refused"
    assert outcome["reason_code"] == "no_actions_file"
    assert reports == [outcome]


def test_a_request_runs_once_however_often_it_is_delivered(tmp_path):
    table, counter = _table(tmp_path)
    reports = []
    runner = _runner(table, reports)
    message = _signed(_request(kv_bytes=8 * 1024**3))
    first = runner.handle(*message)
    again = runner.handle(*message)
    assert first["state"] == "succeeded"
    assert counter.read_text().splitlines() == [f"kv={8 * 1024**3}"]
    assert again["duplicate"] is True
    assert again["state"] == "succeeded"
    assert len(reports) == 2


def test_done_ids_survive_a_restart_of_the_agent(tmp_path):
    table, counter = _table(tmp_path)
    message = _signed(_request(kv_bytes=4096))
    for _ in range(2):  # a new runner over the same state file, as after a restart
        ActionRunner(
            table, {"gpu-07": SECRET}.get, DoneRequests(tmp_path / "done.sqlite3"), lambda o: None
        ).handle(*message)
    assert counter.read_text().splitlines() == ["kv=4096"]


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"params": {"kv_bytes": "1; reboot"}}, "invalid_params"),
        ({"params": {"kv_bytes": 1, "command": "reboot"}}, "invalid_params"),
        ({"params": {"mem_fraction": 0.5}}, "invalid_params"),  # this file reloads by bytes
        ({"deployment": "other"}, "not_allowed"),
        ({"action": "start"}, "not_allowed"),
        ({"action": "rm"}, "unknown_action"),
        ({"expires_at": time.time() - 1}, "expired"),
    ],
)
def test_a_request_outside_the_allow_list_is_refused_with_its_reason(tmp_path, change, code):
    table, counter = _table(tmp_path)
    message = {**_request(kv_bytes=1024), **change}
    if change.get("action") == "start":
        message["params"] = {}
    outcome = _runner(table, []).handle(*_signed(message))
    assert (outcome["state"], outcome["reason_code"]) == ("refused", code)
    assert not counter.exists()


def test_a_request_not_signed_with_the_host_secret_is_refused(tmp_path):
    table, counter = _table(tmp_path)
    outcome = _runner(table, []).handle(*_signed(_request(kv_bytes=1024), secret="forged"))
    assert outcome["reason_code"] == "bad_signature"
    body, signature = _signed(_request(kv_bytes=1024))
    tampered = body.replace("1024", "2048")
    assert _runner(table, []).handle(tampered, signature)["reason_code"] == "bad_signature"
    assert not counter.exists()


def test_a_command_past_its_timeout_is_killed_and_reported(tmp_path):
    table, _ = _table(tmp_path)
    message = {**_request(action="mps_restart", deployment=None, card_index=0)}
    outcome = _runner(table, []).handle(*_signed(message))
    assert outcome["state"] == "timed_out"


def test_outcome_carries_the_output_tail_and_exit_status(tmp_path):
    table = parse_actions(
        f'[deployments."d"]\nrestart = {{ argv = ["{sys.executable}", "-c", '
        "\"import sys; print('x' * 9000); sys.exit(3)\"] }"
    )
    outcome = _runner(table, []).handle(*_signed(_request(action="restart", deployment="d")))
    assert (outcome["state"], outcome["exit_code"]) == ("failed", 3)
    assert 0 < len(outcome["output_tail"]) <= 4000
    assert json.loads(signing.encode(outcome))["request_id"] == outcome["request_id"]


def test_a_command_exiting_77_refused_on_the_host_and_its_last_line_says_why(tmp_path):
    """As the root helper answers (gpu-console-host-action): a refusal, not a failure."""
    table = parse_actions(
        f'[deployments."d"]\nrestart = {{ argv = ["{sys.executable}", "-c", '
        "\"import sys; print('asked'); print('refused: not listed'); sys.exit(77)\"] }"
    )
    outcome = _runner(table, []).handle(*_signed(_request(action="restart", deployment="d")))
    assert (outcome["state"], outcome["reason_code"]) == ("refused", "host_refused")
    assert outcome["detail"] == "refused: not listed"
    assert outcome["output_tail"] == "asked\nrefused: not listed\n"
