"""The combined load test's plan, runner and figures, against the simulator's endpoint server.

No database: the runner and its figures are plain modules. The endpoint server is the fake
inference server of the demo (same paths, same streaming shapes, same error answers).
"""

import pytest

from console.proposals.loadtest.execution import endpoint_failures, run_to_end
from console.proposals.loadtest.plan import (
    Api,
    LoadTestPlan,
    Phase,
    Phases,
    PlanError,
    RequestMix,
    Target,
    busy_hour_rates,
)
from console.proposals.loadtest.results import (
    CardSample,
    as_run,
    card_peaks,
    first_bound,
    latency_series,
    model_summaries,
)
from console.proposals.loadtest.runner import RequestRecord, RunOutcome, run_plan
from inventory.telemetry.simulator.endpoints import Answer, EndpointServer, FixedBehaviour
from tests.processes import free_port

MIX = RequestMix(short_output_tokens=6, long_output_tokens=6, long_share=0.5)


def target(name, url, api=Api.COMPLETIONS, rate=20.0, **fields):
    return Target(
        name=name,
        deployment=f"{name} #1",
        url=url,
        api=api,
        rate_rps=rate,
        rate_source="given",
        slo_ms=500,
        cards=("h:0",),
        isolation="gpu_group",
        **fields,
    )


def run(behaviour, make_targets, *, phases=None, timeout_s=5.0, **options):
    async def go():
        server = EndpointServer(behaviour)
        port = await server.start()
        base = f"http://127.0.0.1:{port}"
        plan = LoadTestPlan(
            "h",
            make_targets(base),
            MIX,
            phases or Phases(ramp_s=0.5, hold_s=2.0, cold_start=False),
            request_timeout_s=timeout_s,
        )
        try:
            return plan, await run_plan(plan, **options)
        finally:
            await server.stop()

    return run_to_end(go())


def by_model(plan, outcome):
    return {row["model"]: row for row in model_summaries(plan, outcome)}


def test_every_api_streams_and_every_model_is_driven_at_once():
    behaviour = FixedBehaviour(
        {key: Answer(0.01, 0.05, 6) for key in ("h/completions", "h/chat", "h/ollama")}
    )
    plan, outcome = run(
        behaviour,
        lambda base: (
            target("completions", f"{base}/h/completions", Api.COMPLETIONS),
            target("chat", f"{base}/h/chat", Api.CHAT),
            target("ollama", f"{base}/h/ollama", Api.OLLAMA),
        ),
    )
    rows = by_model(plan, outcome)
    assert set(rows) == {"completions", "chat", "ollama"}
    for row in rows.values():
        assert row["sent"] > 0
        assert row["failed"] == 0, row["errors"]
        assert row["ttft_ms"]["p99"] <= row["e2e_ms"]["p99"]
        assert row["itl_ms"]["p50"] is not None
    done = [r for r in outcome.records if not r.error]
    assert {r.tokens for r in done} == {6}
    # The windows of all three overlap: one test, not three.
    first_sent = {r.deployment: r.sent_s for r in reversed(outcome.records)}
    last_sent = {r.deployment: r.sent_s for r in outcome.records}
    assert max(first_sent.values()) < min(last_sent.values())
    assert behaviour.in_flight == dict.fromkeys(behaviour.answers, 0)


def test_bad_endpoints_are_reported_per_model_and_the_good_one_is_not_held_back():
    closed = free_port()
    behaviour = FixedBehaviour(
        {
            "h/good": Answer(0.005, 0.02, 6),
            "h/garbage": Answer(0.005, 0.02, 6, mode="garbage"),
            "h/hangs": Answer(0.005, 0.02, 6, mode="hang"),
        }
    )
    plan, outcome = run(
        behaviour,
        lambda base: (
            target("good", f"{base}/h/good"),
            target("garbage", f"{base}/h/garbage"),
            target("hangs", f"{base}/h/hangs", rate=5),
            target("refuses", f"http://127.0.0.1:{closed}/h/x", rate=5),
            target("unknown", f"{base}/h/not-served", rate=5),
        ),
        timeout_s=0.5,
    )
    rows = by_model(plan, outcome)
    assert rows["good"]["failed"] == 0
    assert set(rows["garbage"]["errors"]) == {"garbage"}
    assert set(rows["hangs"]["errors"]) == {"timeout"}
    assert set(rows["refuses"]["errors"]) == {"refused"}
    assert set(rows["unknown"]["errors"]) == {"http_status"}
    assert rows["unknown"]["error_detail"] == "404"
    failing = endpoint_failures(list(rows.values()))
    assert set(failing) == {"garbage", "hangs", "refuses", "unknown"}


def test_a_cancelled_test_stops_and_says_so():
    behaviour = FixedBehaviour({"h/m": Answer(0.005, 0.02, 6)})
    snapshots = []
    _, outcome = run(
        behaviour,
        lambda base: (target("m", f"{base}/h/m"),),
        phases=Phases(ramp_s=1, hold_s=600, cold_start=False),
        progress=snapshots.append,
        cancelled=lambda: len(snapshots) >= 2,
    )
    assert outcome.cancelled
    assert max(r.sent_s for r in outcome.records) < 60
    assert snapshots[-1]["phase"] == "done"
    assert snapshots[0]["models"][0]["model"] == "m"


def test_the_cold_start_runs_where_every_target_restarts_and_is_skipped_otherwise():
    behaviour = FixedBehaviour({"h/a": Answer(0.005, 0.01, 2), "h/b": Answer(0.005, 0.01, 2)})

    def targets(base, restartable=True):
        restart = {name: f"{base}/h/{name}/restart" for name in ("a", "b")}
        if not restartable:
            restart["b"] = ""
        return tuple(
            target(name, f"{base}/h/{name}", restart_url=restart[name]) for name in ("a", "b")
        )

    phases = Phases(ramp_s=0.2, hold_s=0.5)
    _, outcome = run(behaviour, targets, phases=phases)
    assert outcome.cold_start["ran"] and not outcome.cold_start["failed"]
    assert set(outcome.cold_start["ready_s"]) == {"a #1", "b #1"}
    _, outcome = run(behaviour, lambda base: targets(base, restartable=False), phases=phases)
    assert outcome.cold_start == {
        "ran": False,
        "code": "cold_start_not_restartable",
        "params": {"deployments": ["b #1"]},
    }


def test_the_plan_ramps_holds_and_goes_past_the_bound():
    plan = LoadTestPlan(
        "h",
        (target("a", "http://x", rate=3), target("b", "http://y", rate=1)),
        phases=Phases(ramp_s=10, hold_s=20, past_bound=True, past_bound_s=10),
    )
    assert plan.duration_s == 40
    assert [plan.phase_at(t) for t in (0, 10, 29, 30, 40)] == [
        Phase.RAMP,
        Phase.HOLD,
        Phase.HOLD,
        Phase.PAST_BOUND,
        Phase.DONE,
    ]
    assert plan.load_factor(5) == pytest.approx(0.5)
    assert plan.load_factor(35) == pytest.approx(2.0)
    assert plan.ratio() == {"a": 0.75, "b": 0.25}
    assert LoadTestPlan.from_json(plan.to_json()) == plan
    with pytest.raises(PlanError) as error:
        LoadTestPlan("h", (target("a", "", rate=3),))
    assert error.value.code == "no_endpoint"


def test_the_busy_hour_is_the_hour_busiest_for_all_together():
    minutes = {
        "a": [(0, 60, 60), (60, 60, 60), (3600, 600, 60), (3660, 600, 60)],
        "b": [(0, 600, 60), (3600, 60, 60)],
    }
    # Hour 0: 60 + 600 a minute; hour 1: 600 + 60: tied at 660, the first wins.
    rates = busy_hour_rates(minutes)
    assert rates == {"a": 1.0, "b": 10.0}
    minutes["b"].append((3720, 6000, 60))
    assert busy_hour_rates(minutes) == {"a": 10.0, "b": pytest.approx((60 + 6000) / 120)}


def test_a_rate_is_requests_over_the_seconds_they_were_counted_in():
    # An agent flushing every 10 minutes puts ten minutes of requests in one minute's row.
    minutes = {"a": [(0, 6000, 600), (600, 6600, 600)], "b": [(0, 30, 30), (30, 0, 0)]}
    assert busy_hour_rates(minutes) == {"a": 10.5, "b": 1.0}
    # rows written before the windows were kept count as a minute each, as they did
    assert busy_hour_rates({"a": [(0, 120, None), (60, 0, None)]}) == {"a": 1.0}
    # a deployment with minutes but nothing counted has no rate, not a rate of nothing
    assert busy_hour_rates({"a": [(0, 0, 0)]}) == {}


def test_the_first_bound_is_found_in_time_order_with_the_load_at_that_moment():
    plan = LoadTestPlan(
        "h",
        (target("a", "http://x", rate=4), target("b", "http://y", rate=2)),
        phases=Phases(ramp_s=10, hold_s=20, cold_start=False),
    )
    started = 1_000_000.0
    series = {
        "a": [{"t_s": 5.0, "count": 10, "p50_ms": 100, "p99_ms": 900}],
        "b": [{"t_s": 0.0, "count": 10, "p50_ms": 100, "p99_ms": 200}],
    }
    samples = [
        CardSample("h:0", started + 3, 50),
        CardSample("h:0", started + 12, 90),
        CardSample("h:1", started + 8, 99),
    ]
    bounds = {"h:0": 80, "h:1": 100}
    assert card_peaks(samples) == {"h:0": 90, "h:1": 99}
    first = first_bound(plan, started, series, samples, bounds)
    # a's P99 crossed in the 5-10 s step (known at its end, 10 s); h:0 only at 12 s.
    assert (first["kind"], first["model"], first["t_s"]) == ("latency", "a", 10.0)
    assert first["load_rps"] == {"a": 4.0, "b": 2.0}
    series["a"][0]["p99_ms"] = 400
    first = first_bound(plan, started, series, samples, bounds)
    assert (first["kind"], first["card"], first["t_s"], first["phase"]) == (
        "memory",
        "h:0",
        12.0,
        "hold",
    )
    assert first_bound(plan, started, series, samples, {"h:0": 100, "h:1": 100}) is None


def test_the_series_buckets_latency_per_model_over_the_test():
    behaviour = FixedBehaviour({"h/a": Answer(0.005, 0.02, 3)})
    plan, outcome = run(behaviour, lambda base: (target("a", f"{base}/h/a", rate=30),))
    series = latency_series(plan, outcome)
    assert [point["t_s"] for point in series["a"]] == [0.0]
    assert series["a"][0]["count"] == sum(1 for r in outcome.records if not r.error)


def test_the_gate_reads_the_rate_offered_and_the_count_achieved_apart():
    plan = LoadTestPlan(
        "h",
        (target("chat", "http://x", rate=2.0), target("embed", "http://y", rate=8.0)),
        MIX,
        Phases(ramp_s=1.0, hold_s=10.0, cold_start=False),
    )
    # Poisson arrivals in a short hold: chat drew 15 where 20 were expected, two failed.
    records = [
        RequestRecord("chat #1", 1.0 + i * 0.6, False, ttft_s=0.05, e2e_s=0.2) for i in range(15)
    ]
    records += [
        RequestRecord("embed #1", 1.0 + i * 0.12, False, ttft_s=0.02, e2e_s=0.1) for i in range(80)
    ]
    records[0].error = records[1].error = "timeout"
    summaries = model_summaries(plan, RunOutcome(0.0, 11.0, records, {"ran": False}))
    rows = {row["model"]: row for row in summaries}
    assert (rows["chat"]["rate_rps"], rows["chat"]["offered_rps"]) == (1.5, 2.0)
    run = {
        m.model: m for m in as_run(plan, RunOutcome(0.0, 11.0, records, {}), summaries, {}).models
    }
    assert (run["chat"].request_rate, run["chat"].throughput_rps) == (2.0, 1.3)
    assert (run["embed"].request_rate, run["embed"].throughput_rps) == (8.0, 8.0)
