"""End to end: host actions, degradation, MPS recovery and an off-peak reload, with real
worker, ingest, beat and agent processes on a real broker and the test database.

The agent collects the operations demo host (inventory.telemetry.simulator.
operations_scenario) and runs the actions its actions file allows on the simulator's model.
"""

import datetime as dt
import json
import sys
import time

import pytest
from django.utils import timezone

from console.core.auditing import Action
from console.core.auditing.models import AuditEntry
from console.operations import messages, off_peak, services
from console.operations.models import (
    DefragPlan,
    DefragReload,
    DegradationRun,
    HostAction,
    MpsRecovery,
    StandingPolicy,
)
from inventory.models import CardSample, Deployment, Event
from tests.processes import Processes, database_url_for_processes, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

COUNTER = "import sys; print(sys.argv[2], file=open(sys.argv[1], 'a'))"
PROCESS_NAMES = ("central", "ingest", "agent", "beat")


def _actions_file(tmp_path):
    counter = tmp_path / "started.txt"
    path = tmp_path / "actions.toml"
    path.write_text(
        f"""
[deployments."batch-8b"]
reload_with = {{ simulated = true }}
stop = {{ simulated = true }}
[deployments."code-8b"]
restart = {{ simulated = true }}
[deployments."chat-70b-awq"]
start = {{ argv = ["{sys.executable}", "-c", "{COUNTER}", "{counter}", "start"] }}
[host]
mps_restart = {{ simulated = true }}
"""
    )
    return path, counter


def _start(broker, tmp_path, host, agent_env, queue="host.simulator"):
    env = {
        "DATABASE_URL": database_url_for_processes(),
        "AGENT_FLUSH_INTERVAL_S": "2",
        "AGENT_SCRAPE_INTERVAL_S": "1",
        "COLLECTION_PLAN_INTERVAL_S": "2",
        "OPERATIONS_WATCH_INTERVAL_S": "2",
        "OPERATIONS_SETTLE_S": "8",
        "ROLLUP_REFRESH_INTERVAL_S": "5",
    }
    env |= broker.env
    broker.purge(queue, f"{queue}.operations")
    secrets = tmp_path / "agent-secrets.json"
    secrets.write_text(json.dumps({host.name: host.agent_secret}))
    processes = Processes(env, tmp_path)
    processes.celery_worker("central", "celery")
    processes.start("ingest", ["manage.py", "ingest_worker", "--max-wait", "0.2"])
    processes.agent(
        "agent",
        queue,
        {
            "AGENT_SOURCE": "simulator",
            "SIMULATOR_FLEET": "operations",
            "AGENT_SECRET_FILE": str(secrets),
            "AGENT_STATE_DIR": str(tmp_path / "agent-state"),
            # No simulated inference endpoints: nothing here asks them, and the port may be taken.
            "SIMULATOR_ENDPOINTS_PORT": "0",
            **agent_env,
        },
    )
    processes.beat(tmp_path)
    return processes


def _logs(processes):
    return lambda: "\n".join(
        f"--- {name} ---\n{processes.log(name)[-2500:]}" for name in PROCESS_NAMES
    )


def _deployment(host, name):
    return Deployment.objects.get(host=host, runtime_name=name)


def _approved(action_name, host, deployment, personas, **params):
    asked = services.do_request_action(
        acting_user=personas["oncall"],
        host=host,
        action=action_name,
        deployment=deployment,
        params=params,
    )
    assert asked.state == HostAction.State.AWAITING_APPROVAL  # four eyes: not sent yet
    return services.do_approve_action(asked, acting_user=personas["approver"])


def test_without_an_actions_file_the_agent_refuses_every_action(
    ops_host, personas, tmp_path, isolated_broker
):
    processes = _start(isolated_broker, tmp_path, ops_host, {})
    try:
        with isolated_broker.publishing():
            wait_for(
                lambda: CardSample.objects.filter(gpu__host=ops_host).exists(),
                timeout=120,
                what="samples from the operations host",
                logs=_logs(processes),
            )
            action = _approved("restart", ops_host, _deployment(ops_host, "code-8b"), personas)
            wait_for(
                lambda: HostAction.objects.get(pk=action.pk).finished,
                timeout=60,
                what="the agent's answer",
                logs=_logs(processes),
            )
    finally:
        processes.stop()
    action.refresh_from_db()
    assert (action.state, action.reason_code) == ("refused", "no_actions_file")
    assert "no actions file" in action.detail
    assert not Event.objects.filter(host=ops_host, kind=Event.Kind.PROCESS_RESTART).exists()
    assert AuditEntry.objects.filter(
        action=Action.HOST_ACTION_OUTCOME, object_id=str(action.pk)
    ).exists()


def test_actions_degradation_mps_recovery_and_an_off_peak_reload(
    ops_host, personas, tmp_path, isolated_broker
):
    actions_file, counter = _actions_file(tmp_path)
    for kind in (StandingPolicy.Kind.DEGRADATION, StandingPolicy.Kind.MPS_RESTART):
        services.do_sign_policy(acting_user=personas["approver"], host=ops_host, kind=kind)
    crash_at = time.time() + 60
    processes = _start(
        isolated_broker,
        tmp_path,
        ops_host,
        {"AGENT_ACTIONS_FILE": str(actions_file), "SIMULATOR_MPS_CRASH_AT": str(crash_at)},
    )
    logs = _logs(processes)
    try:
        with isolated_broker.publishing():
            # 1. An allowed action runs once however often it is delivered, and is audited.
            chat = _deployment(ops_host, "chat-70b-awq")
            action = _approved("start", ops_host, chat, personas)
            messages.publish(action)  # the broker delivers it a second time
            wait_for(
                lambda: HostAction.objects.get(pk=action.pk).deliveries >= 2,
                timeout=120,
                what="both deliveries of the start request answered",
                logs=logs,
            )
            action.refresh_from_db()
            assert action.state == HostAction.State.SUCCEEDED
            assert counter.read_text().splitlines() == ["start"]
            outcomes = AuditEntry.objects.filter(
                action=Action.HOST_ACTION_OUTCOME, object_id=str(action.pk)
            )
            assert outcomes.count() == 2
            assert AuditEntry.objects.filter(
                action=Action.HOST_ACTION_APPROVE, object_id=str(action.pk), actor_name="approver"
            ).exists()

            # 2. Card 0: the pools hold 98% and a stray job fills what they leave; the batch
            # model's KV is shrunk first and the on-demand part recovers (the job then grows
            # to the 4 GiB it wants, so NVML may stay near 95%: RECOVERED is the rule's word).
            run = wait_for(
                lambda: DegradationRun.objects.filter(
                    gpu__host=ops_host, gpu__index=0, state=DegradationRun.State.RECOVERED
                ).first(),
                timeout=150,
                what="card 0 degraded below its limit",
                logs=logs,
            )
            first = run.plan[0]
            assert (first["kind"], first["runtime_name"]) == ("shrink_kv", "batch-8b")
            assert first["kv_to_bytes"] < first["kv_from_bytes"]
            assert run.used_before_bytes >= 0.95 * run.total_bytes
            assert run.used_after_bytes < run.used_before_bytes
            shrink = run.actions.get()
            assert (shrink.action, shrink.state, shrink.policy.kind) == (
                "reload_with",
                "succeeded",
                "degradation",
            )
            batch = _deployment(ops_host, "batch-8b")
            assert batch.kv_reservation_bytes == first["kv_to_bytes"]  # the inventory follows
            assert AuditEntry.objects.filter(
                action=Action.DEPLOYMENT_RESIZE, object_id=str(batch.pk)
            ).exists()

            # 3. The MPS server of card 1 crashes; it is restarted and both clients come back.
            recovery = wait_for(
                lambda: MpsRecovery.objects.filter(
                    host=ops_host, state=MpsRecovery.State.RECOVERED
                ).first(),
                timeout=200,
                what="the MPS server restarted and its clients back",
                logs=logs,
            )
            assert set(recovery.clients) == {"embed-mps-a", "embed-mps-b"}
            for client in recovery.clients.values():
                assert client["returned_pid"] and client["returned_pid"] != client["pid"]
            restart = recovery.actions.get()
            assert (restart.action, restart.state, restart.params) == (
                "mps_restart",
                "succeeded",
                {"card_index": 1},
            )

            # 4. An approved off-peak reload runs in its window, fragmentation before and after.
            now = timezone.now()
            code = _deployment(ops_host, "code-8b")
            plan = DefragPlan.objects.create(
                host=ops_host, window_start=now, window_end=now + dt.timedelta(minutes=10)
            )
            DefragReload.objects.create(
                plan=plan, deployment=code, gpu=code.gpus.get(), order=0, not_before=now,
                reason="fragmentation_index", estimated_bytes=0,
            )  # fmt: skip
            off_peak.do_decide_plan(plan, acting_user=personas["approver"], approve=True)
            reload = wait_for(
                lambda: DefragReload.objects.filter(plan=plan, state="done").first(),
                timeout=150,
                what="the planned reload done and measured",
                logs=logs,
            )
    finally:
        processes.stop()
    assert reload.action.state == HostAction.State.SUCCEEDED
    assert reload.action.origin == HostAction.Origin.DEFRAG
    assert reload.fragmentation_before is not None and reload.fragmentation_after is not None
    assert reload.fragmentation_after <= reload.fragmentation_before
    assert DefragPlan.objects.get(pk=plan.pk).state in {"running", "done"}
