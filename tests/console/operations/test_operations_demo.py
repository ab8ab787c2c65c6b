"""`make run` brings the operations demo up: its host with its cards, deployments, standing
policies and an approved reload in the inventory, and an agent of its own collecting it with
an actions file of simulated actions only."""

import io

import pytest
from django.core.management import call_command
from django.utils import timezone

from console import launcher
from console.core.auditing import Action
from console.core.auditing.models import AuditEntry
from console.operations.models import DefragPlan, StandingPolicy
from inventory import collection
from inventory.agent.actions import read_actions
from inventory.agent.secrets import read_secrets
from inventory.demo import _create_host
from inventory.models import Host, ServedModel
from inventory.telemetry.simulator.scenarios import a100_host

pytestmark = pytest.mark.django_db


def _seed() -> str:
    out = io.StringIO()
    call_command("seed_operations_demo", stdout=out)
    return out.getvalue()


def test_the_seed_creates_the_operations_host_its_policies_and_an_approved_reload(personas):
    before = timezone.now()
    assert "created: ops-a100" in _seed()
    host = Host.objects.get(name=launcher.OPERATIONS_HOST)
    assert host.collector == Host.Collector.SIMULATED
    assert sorted(g.index for g in host.gpus.all()) == [0, 1, 2]
    deployments = {d.runtime_name: d for d in host.deployments.prefetch_related("gpus")}
    assert {name: [g.index for g in d.gpus.all()] for name, d in deployments.items()} == {
        "chat-70b-awq": [0], "batch-8b": [0], "embed-mps-a": [1], "embed-mps-b": [1],
        "code-8b": [2],
    }  # fmt: skip
    assert deployments["embed-mps-a"].isolation_mode == "mps"
    # Its agent serves no inference endpoints (the demo fleet's agent has the port).
    assert {d.endpoint_url for d in deployments.values()} == {""}
    priorities = dict(ServedModel.objects.values_list("name", "priority"))
    assert priorities["chat-70b-awq"] < priorities["batch-8b"]  # the batch model goes first
    plan = collection.collection_plan(host)
    assert len(plan["deployments"]) == 5

    signed = StandingPolicy.objects.filter(host=host, revoked_at__isnull=True)
    assert {(p.kind, p.signed_by.username) for p in signed} == {
        ("degradation", "approver"),
        ("mps_restart", "approver"),
    }
    reload_plan = DefragPlan.objects.get(host=host)
    assert reload_plan.state == DefragPlan.State.APPROVED
    assert reload_plan.window_start > before  # the demo sees it run, a few minutes on
    (reload,) = reload_plan.reloads.select_related("gpu", "deployment")
    assert (reload.deployment.runtime_name, reload.gpu.index) == ("code-8b", 2)
    for action in (Action.DEMO_SEED, Action.POLICY_SIGN, Action.DEFRAG_PLAN, Action.DEFRAG_DECIDE):
        assert AuditEntry.objects.filter(action=action, host=host).exists(), action

    # The priorities it sets are audited in the seed's own change, as every write is.
    seeded = AuditEntry.objects.get(action=Action.DEMO_SEED, host=host)
    set_priorities = AuditEntry.objects.filter(action=Action.SERVED_MODEL_PRIORITY)
    assert {(e.object_repr, e.before["priority"], e.after["priority"]) for e in set_priorities} == {
        ("chat-70b-awq", 2, 1),
        ("batch-8b", 2, 3),
    }
    assert {e.change_id for e in set_priorities} == {seeded.change_id}

    # A second `make run` leaves the host, and what happened on it, as it is.
    assert "present" in _seed()
    assert DefragPlan.objects.filter(host=host).count() == 1
    assert StandingPolicy.objects.filter(host=host).count() == 2


def test_the_operations_host_has_a_simulator_agent_of_its_own(personas):
    _seed()
    host = Host.objects.get(name=launcher.OPERATIONS_HOST)
    demo_host = _create_host(a100_host())
    now = timezone.now().timestamp()
    agents = {name: (argv, env) for name, argv, env in launcher.simulator_agents(["agent"], now)}
    assert set(agents) == {"sim", "sim-operations"}

    def queue(argv):
        return argv[argv.index("-Q") + 1]

    demo_argv, demo_env = agents["sim"]
    assert queue(demo_argv) == collection.agent_queue(demo_host) == collection.SIMULATOR_QUEUE
    assert "AGENT_ACTIONS_FILE" not in demo_env  # the demo fleet's hosts refuse every action
    # It signs its hosts' batches (seed_demo --secrets-file writes their secrets there).
    assert demo_env["AGENT_SECRET_FILE"] == str(launcher.DEMO_FLEET_SECRETS)
    ops_argv, ops_env = agents["sim-operations"]
    assert queue(ops_argv) == collection.agent_queue(host) != collection.SIMULATOR_QUEUE
    assert ops_env["AGENT_SOURCE"] == "simulator"
    assert ops_env["SIMULATOR_FLEET"] == "operations"
    assert ops_env["AGENT_SECRET_FILE"] == str(launcher.OPERATIONS_SECRET)
    assert float(ops_env["SIMULATOR_MPS_CRASH_AT"]) > now  # the crash comes during the demo

    # What the story asks of the host is allowed, and only as the simulator's model of it.
    table = read_actions(ops_env["AGENT_ACTIONS_FILE"])
    commands = [c for actions in table.deployments.values() for c in actions.values()]
    commands += list(table.host.values())
    assert commands and all(c.simulated and not c.argv for c in commands)
    assert {"reload_with", "stop"} <= set(table.deployments["batch-8b"])
    assert "restart" in table.deployments["code-8b"] and "mps_restart" in table.host
    assert set(table.deployments) == {d.runtime_name for d in host.deployments.all()}


def test_the_seed_hands_the_demo_fleets_agent_its_hosts_secrets_only(personas, tmp_path):
    _seed()
    demo_host = _create_host(a100_host())
    path = tmp_path / "agent" / "demo-fleet.secrets.json"
    call_command("seed_demo", "--history-days", "0", "--secrets-file", str(path),
                 stdout=io.StringIO())  # fmt: skip
    secret_for = read_secrets(str(path))
    assert secret_for(demo_host.name) == demo_host.agent_secret
    # The operations host has an agent of its own, with its own secret file.
    assert secret_for(launcher.OPERATIONS_HOST) is None
    assert oct(path.stat().st_mode & 0o777) == "0o600"
