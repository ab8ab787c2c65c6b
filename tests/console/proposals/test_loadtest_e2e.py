"""End to end: a combined load test run by a real worker against the simulator's endpoints.

Real processes: the simulator agent (it serves every simulated deployment's OpenAI API and
sends the telemetry), beat, an ingest worker and the central worker that runs the test and
then the gates. On the 8-card demo host time-sharing its cards (infer-00) the co-tenants raise
each other's P99 over their SLOs and gate 4 fails on latency; on the one bound to card groups
(infer-01) it passes.
"""

import pytest
from django.utils import timezone

from console.proposals import services
from console.proposals.loadtest import inputs as loadtest_inputs
from console.proposals.loadtest import services as loadtest_services
from console.proposals.loadtest.plan import Phases, RequestMix
from console.proposals.models import LoadTest, Proposal
from console.proposals.transitions import State
from inventory.models import Deployment
from inventory.timeseries import queries
from tests.console.proposals.support import create_proposal, english
from tests.processes import (
    Processes,
    database_url_for_processes,
    demo_host_signed,
    free_port,
    simulator_secrets,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

# The test's volume and request sizes, small enough for the agent process that serves the
# endpoints on a shared test machine; the ratio between models is the busy hour's.
TOTAL_RPS = 20.0
MIX = RequestMix(
    short_prompt_tokens=32,
    short_output_tokens=6,
    long_prompt_tokens=512,
    long_output_tokens=16,
    long_share=0.2,
)


# The co-tenants' own traffic follows the simulated day, so the test runs at one hour of it
# whatever the time of day: 11:00 UTC, on the rise to the demo fleet's busy hour (14:00-14:45),
# where their P99s stand well over their SLOs on shared cards (at the trough they come near)
# and a card is not yet run out of memory (at the peak an endpoint can be down the whole test).
SIMULATED_HOUR = 11.0


def _shift_to(hour):
    now = timezone.now()
    since_midnight = now.hour * 3600 + now.minute * 60 + now.second
    return (hour * 3600 - since_midnight) % 86_400


@pytest.fixture
def stack(settings, tmp_path, isolated_broker):
    port = free_port()
    settings.SIMULATOR_ENDPOINTS_PORT = port
    fast = {
        "AGENT_FLUSH_INTERVAL_S": "2",
        "COLLECTION_PLAN_INTERVAL_S": "2",
        "ROLLUP_REFRESH_INTERVAL_S": "3",
        "LOADTEST_FLUSH_WAIT_S": "60",
    }
    for name, value in fast.items():
        setattr(settings, name, float(value))
    isolated_broker.purge("host.simulator")
    env = {"DATABASE_URL": database_url_for_processes(), **fast, **isolated_broker.env}
    processes = Processes(env, tmp_path)
    processes.celery_worker("central", "celery")
    processes.start("ingest", ["manage.py", "ingest_worker", "--max-wait", "0.2"])
    processes.agent(
        "simulator",
        "host.simulator",
        {
            "AGENT_SOURCE": "simulator",
            **simulator_secrets(tmp_path, ["infer-00", "infer-01"]),
            "SIMULATOR_ENDPOINTS_PORT": str(port),
            "SIMULATOR_DAY_SHIFT_S": str(_shift_to(SIMULATED_HOUR)),
        },
    )
    processes.beat(tmp_path)
    with isolated_broker.publishing():
        yield processes
    processes.stop()


def _logs(processes):
    def relevant(name):
        lines = processes.log(name).splitlines()
        wanted = [line for line in lines if "load_test" in line or "Error" in line]
        return "\n".join(wanted[-40:] or lines[-20:])

    return lambda: "\n".join(
        f"--- {name} ---\n{relevant(name)}" for name in ("central", "ingest", "simulator")
    )


def _resize_proposal(author, deployment):
    return create_proposal(
        author,
        host=deployment.host,
        gpus=list(deployment.gpus.all()),
        model=deployment.served_model,
        action="resize",
        deployment=deployment,
        isolation_mode=deployment.isolation_mode,
        mps_acknowledged=True,
    )


def _has_engine_history(deployments):
    minutes = queries.engine_minutes(
        [d.pk for d in deployments],
        timezone.now() - loadtest_inputs.HISTORY,
        timezone.now(),
    )
    return all(any(m.requests for m in minutes.get(d.pk, [])) for d in deployments)


def _run_and_check(stack, personas, proposal, client):
    tenants = list(proposal.host.deployments.filter(gpus__in=proposal.target_gpus()).distinct())
    wait_for(
        lambda: _has_engine_history(tenants),
        timeout=180,
        what=f"a minute of engine history of {proposal.host.name}'s deployments",
        logs=_logs(stack),
    )
    busy = loadtest_inputs.real_rates([d.pk for d in tenants], timezone.now())
    plan = loadtest_inputs.plan_for_proposal(
        proposal,
        phases=Phases(ramp_s=3, hold_s=20, cold_start=False),
        mix=MIX,
        rate_scale=TOTAL_RPS / sum(busy.values()),
    )
    test = loadtest_services.do_start_load_test(proposal, acting_user=personas["oncall"], plan=plan)
    # The proposal page shows the test's progress while it runs.
    wait_for(
        lambda: LoadTest.objects.get(pk=test.pk).progress.get("models"),
        timeout=60,
        what="the runner's first progress",
        logs=_logs(stack),
    )
    page = client.get(proposal.get_absolute_url()).content.decode()
    status = client.get(f"{test.get_absolute_url()}status.json").json()
    if not status["finished"]:
        assert status["status"] == "running"
        assert {m["model"] for m in status["progress"]["models"]} == {t.name for t in plan.targets}
        assert 'data-field="phase"' in page
        assert "Running" in page
    finished = wait_for(
        lambda: (t := LoadTest.objects.get(pk=test.pk)).finished and t,
        timeout=180,
        what="the combined test to finish",
        logs=_logs(stack),
    )
    assert finished.status == LoadTest.Status.DONE, (
        finished.failure_code,
        finished.failure_params,
    )
    assert finished.result["telemetry_flushed"]
    assert all(card["peak_bytes"] for card in finished.result["cards"])
    services.do_submit(Proposal.objects.get(pk=proposal.pk), acting_user=personas["oncall"])
    checked = wait_for(
        lambda: (
            (p := Proposal.objects.get(pk=proposal.pk)).state
            not in (State.SUBMITTED, State.CHECKING)
            and p
        ),
        timeout=120,
        what="the worker to check the gates",
        logs=_logs(stack),
    )
    gate = checked.gate_results.get(revision=checked.revision, gate="load_test")
    # For the record of a run (pytest -s): what the combined test showed on this host.
    print(proposal.host.name, gate.status, [r["code"] for r in gate.reasons])
    for row in finished.result["models"]:
        print(f"  {row['model']}: {row['rate_rps']}/s P99 {row['e2e_ms']['p99']} ms "
              f"(SLO {row['slo_ms']} ms)")  # fmt: skip
    print("  first bound:", finished.result["first_bound"])
    return finished, gate


def test_shared_cards_fail_gate_4_on_p99_and_grouped_cards_pass(stack, personas, client_as):
    shared, grouped = demo_host_signed("infer-00"), demo_host_signed("infer-01")
    on_shared = shared.deployments.get(runtime_name="chat-large-r0")
    on_group = grouped.deployments.get(runtime_name="chat-large")
    assert on_shared.isolation_mode == Deployment.Isolation.TIME_SLICING

    proposal = _resize_proposal(personas["oncall"], on_shared)
    test, gate = _run_and_check(stack, personas, proposal, client_as("oncall"))
    codes = {reason["code"].removeprefix("gate.load_test.") for reason in gate.reasons}
    assert gate.status == "fail"
    assert "p99_over_slo" in codes, gate.reasons
    assert not codes & {"ratio_off", "ratio_unverifiable", "no_telemetry"}, gate.reasons
    # Near the simulated busy hour the co-tenants' KV can run a shared card out of memory: the
    # replica restarts and answers 503 meanwhile, which the gate reports as failed requests.
    for row in test.result["models"]:
        if row["failed"]:
            assert (set(row["errors"]), row["error_detail"]) == ({"http_status"}, "503"), row
    assert {row["model"] for row in test.result["models"]} == {
        "chat-large",
        "code-medium",
        "embed-small",
    }
    assert test.result["first_bound"] is not None
    page = client_as("oncall").get(test.get_absolute_url())
    assert page.status_code == 200
    assert b"latency-chart" in page.content
    detail = client_as("oncall").get(proposal.get_absolute_url())
    assert b'data-testid="console-load-test"' in detail.content

    proposal = _resize_proposal(personas["oncall"], on_group)
    test, gate = _run_and_check(stack, personas, proposal, client_as("oncall"))
    assert gate.status == "pass", gate.reasons
    assert english(gate.evidence["card_peaks"]).startswith("the console's telemetry samples from")
    assert [row["model"] for row in test.result["models"]] == ["chat-large"]
