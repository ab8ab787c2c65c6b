"""End to end, with real worker, ingest, beat and agent processes: degradation that cannot
shrink enough evicts the lowest-priority tenant, on the operations demo's host as `make run`
seeds and collects it; and a card that stays over its limit refuses new loads, which the
gate and the solver honour until an approver clears it."""

import json

import pytest
from django.utils import timezone

from console import launcher
from console.core.auditing import Action
from console.core.auditing.models import AuditEntry
from console.operations import services
from console.operations.demo import ensure_operations_demo
from console.operations.models import DegradationRun, StandingPolicy
from console.proposals import services as proposals
from console.proposals.models import Proposal
from console.proposals.transitions import State
from inventory.models import CardRefusal, Deployment
from tests.console.operations.test_operations_e2e import _actions_file, _deployment, _logs, _start
from tests.console.proposals.support import create_proposal
from tests.factories import GIB, ServedModelFactory
from tests.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

# Shrinking the batch model's KV by 0.1% frees 12 MiB: the stray job's 1.6 GiB stays above 95%
# of the 1.6 GiB or so the pools leave.
NOT_ENOUGH_SHRINK = {"kv_floor_fraction": 0.999}


def _operations_agent(tmp_path, host) -> tuple[str, dict]:
    """The queue and environment `make run` gives the operations host's agent, with this
    test's secret file and state folder, and no MPS crash."""
    (argv, env) = next(
        (argv, env)
        for name, argv, env in launcher.simulator_agents([], timezone.now().timestamp())
        if name == "sim-operations"
    )
    env = {k: v for k, v in env.items() if k != "SIMULATOR_MPS_CRASH_AT"}
    secrets = tmp_path / "ops-secret.json"
    secrets.write_text(json.dumps({host.name: host.agent_secret}))
    env |= {"AGENT_SECRET_FILE": str(secrets), "AGENT_STATE_DIR": str(tmp_path / "ops-state")}
    return argv[argv.index("-Q") + 1], env


def test_the_seeded_demo_host_evicts_its_lowest_priority_tenant_when_shrinking_is_not_enough(
    personas, tmp_path, settings, isolated_broker
):
    settings.COLLECTION_PLAN_INTERVAL_S = 2.0
    host = ensure_operations_demo(timezone.now())
    services.do_sign_policy(
        acting_user=personas["approver"], host=host, kind=StandingPolicy.Kind.DEGRADATION,
        params=NOT_ENOUGH_SHRINK,
    )  # fmt: skip
    queue, agent_env = _operations_agent(tmp_path, host)
    processes = _start(isolated_broker, tmp_path, host, agent_env, queue=queue)
    try:
        run = wait_for(
            lambda: DegradationRun.objects.filter(
                gpu__host=host, gpu__index=0, state=DegradationRun.State.RECOVERED
            ).first(),
            timeout=150,
            what="card 0 degraded below its limit by an eviction",
            logs=_logs(processes),
        )
    finally:
        processes.stop()
    assert [(s["kind"], s["runtime_name"]) for s in run.plan] == [("evict", "batch-8b")]
    assert run.used_before_bytes >= 0.95 * run.total_bytes
    assert run.used_after_bytes < 0.95 * run.total_bytes
    assert run.used_after_bytes < run.used_before_bytes
    stop = run.actions.get()
    assert (stop.action, stop.state, stop.policy.signed_by.username) == (
        "stop",
        "succeeded",
        "approver",
    )
    batch, chat = _deployment(host, "batch-8b"), _deployment(host, "chat-70b-awq")
    assert batch.status == Deployment.Status.STOPPED
    assert chat.status != Deployment.Status.STOPPED  # the card's most important model stays
    assert AuditEntry.objects.filter(
        action=Action.DEPLOYMENT_STOP, object_id=str(batch.pk)
    ).exists()
    settled = AuditEntry.objects.get(action=Action.DEGRADATION_SETTLE, object_id=str(run.pk))
    assert settled.after["used_after_bytes"] == run.used_after_bytes
    assert AuditEntry.objects.filter(
        action=Action.DEGRADATION_START, object_id=str(run.pk)
    ).exists()
    assert not CardRefusal.objects.filter(gpu=run.gpu).exists()


def _checked(proposal, personas, logs):
    proposals.do_submit(proposal, acting_user=personas["oncall"])
    checked = wait_for(
        lambda: (
            Proposal.objects.filter(pk=proposal.pk)
            .exclude(state__in=[State.SUBMITTED, State.CHECKING])
            .first()
        ),
        timeout=90,
        what="the worker to check the gates",
        logs=logs,
    )
    return checked, {r.gate: r for r in checked.gate_results.filter(revision=checked.revision)}


def test_a_card_that_stays_over_its_limit_refuses_new_loads_until_an_approver_clears_it(
    ops_host, personas, tmp_path, isolated_broker
):
    actions_file, _ = _actions_file(tmp_path)
    services.do_sign_policy(
        acting_user=personas["approver"], host=ops_host, kind=StandingPolicy.Kind.DEGRADATION,
        params={**NOT_ENOUGH_SHRINK, "allow_evict": False},
    )  # fmt: skip
    processes = _start(
        isolated_broker, tmp_path, ops_host, {"AGENT_ACTIONS_FILE": str(actions_file)}
    )
    logs = _logs(processes)
    card = ops_host.gpus.get(index=0)
    try:
        with isolated_broker.publishing():
            refusal = wait_for(
                lambda: CardRefusal.objects.filter(gpu=card, cleared_at__isnull=True).first(),
                timeout=150,
                what="card 0 refusing new loads",
                logs=logs,
            )
            # The run that refused: the stray job grows into what a first shrink freed, so an
            # earlier run may have shrunk alone (and settled, still over) before this one.
            run = wait_for(
                lambda: DegradationRun.objects.filter(
                    gpu=card,
                    state=DegradationRun.State.NOT_RECOVERED,
                    plan__contains=[{"kind": "refuse"}],
                ).first(),
                timeout=60,
                what="the run that refused settled with card 0 still over its limit",
                logs=logs,
            )
            assert [s["kind"] for s in run.plan] == ["shrink_kv", "refuse"]
            assert run.used_after_bytes >= 0.95 * run.total_bytes
            assert AuditEntry.objects.filter(
                action=Action.CARD_REFUSAL_SET, object_id=str(refusal.pk)
            ).exists()

            # Gate 1 fails a new model named on the card, saying why; the solver leaves it out.
            _, results = _checked(
                create_proposal(
                    personas["oncall"], host=ops_host, gpus=[card], kv_reservation_bytes=GIB,
                    model=ServedModelFactory(name="tiny-named", weights_bytes=2 * GIB),
                ),
                personas,
                logs,
            )  # fmt: skip
            assert results["memory"].status == "fail"
            assert results["memory"].numbers.get("refused") == str(card)
            chosen, results = _checked(
                create_proposal(
                    personas["oncall"], host=ops_host, let_solver_choose=True,
                    isolation_mode=Deployment.Isolation.TIME_SLICING, kv_reservation_bytes=GIB,
                    model=ServedModelFactory(name="tiny-solved", weights_bytes=2 * GIB),
                ),
                personas,
                logs,
            )  # fmt: skip
            assert "memory" in results
            assert card not in chosen.solver_gpus.all()

            # Only an approver clears it, and the clearing is audited.
            cleared = services.do_clear_refusal(refusal, acting_user=personas["approver"])
            assert AuditEntry.objects.filter(
                action=Action.CARD_REFUSAL_CLEAR, object_id=str(refusal.pk), actor_name="approver"
            ).exists()
            assert cleared.cleared_by == personas["approver"]
            # While it refused, the watch left the card to a person: no run after the one that
            # refused.
            assert not DegradationRun.objects.filter(gpu=card, started_at__gt=run.started_at)
    finally:
        processes.stop()
