"""Gate 4: a combined load test, imported from vLLM's benchmark JSON or a CSV."""

import dataclasses
import json

import pytest
from django.utils import timezone

from console.core.reason_text import render_in
from console.proposals import services
from console.proposals.gate_checks import check_load_test
from console.proposals.gates import GateStatus
from console.proposals.gates.loadtest import (
    Colocated,
    LoadTestRequest,
    Telemetry,
    evaluate_load_test,
)
from console.proposals.gates.loadtest_report import (
    LoadTestFormatError,
    LoadTestRun,
    combine,
    parse_card_peaks,
    parse_csv,
    parse_vllm_result,
)
from inventory.analytics.reasons import Reason
from inventory.models import Deployment
from tests.console.proposals.support import (
    LOADTESTS,
    create_proposal,
    english,
    recent_combined_import,
    seed_host,
)
from tests.factories import GIB, ServedModelFactory

CARD = "a100-node:1"
PEAKS = f"card,peak_gib\n{CARD},74.5\n"
RATES = {"qwen2-14b-q4": 4.0, "qwen2-7b-q4": 6.0, "bge-large-fp16": 12.0, "phi-3-mini": 3.0}


def vllm_files(*models: str) -> list[tuple[str, bytes]]:
    files = sorted(LOADTESTS.glob("openai-*.json"))
    return [
        (f.name, f.read_bytes()) for f in files if not models or any(m in f.name for m in models)
    ]


def colocated(slo=800, rates=RATES) -> tuple[Colocated, ...]:
    return tuple(Colocated(name, slo, (CARD,), rates.get(name)) for name in RATES)


WINDOW = ("2025-06-11T14:20:05+00:00", "2025-06-11T14:30:08+00:00")
MEASURED = Telemetry(WINDOW, {CARD: round(74.5 * GIB)})


def gate(run: LoadTestRun | None, telemetry=MEASURED, **kwargs) -> object:
    bounds = {CARD: 76 * GIB}
    models = kwargs.get("models", colocated())
    return evaluate_load_test(LoadTestRequest(models, bounds, run, telemetry=telemetry))


def _phi_on(card, personas):
    """The seed's proposal of phi-3-mini time-sharing `card` at 3 requests/s."""
    return create_proposal(
        personas["oncall"],
        host=card.host,
        gpus=[card],
        model=ServedModelFactory(name="phi-3-mini", weights_bytes=8 * GIB),
        kv_reservation_bytes=4 * GIB,
        isolation_mode=Deployment.Isolation.TIME_SLICING,
        expected_request_rate=3.0,
    )


def codes(outcome) -> list[str]:
    return [reason.code.removeprefix("gate.load_test.") for reason in outcome.reasons]


def test_the_vllm_result_is_read_by_its_real_field_names():
    name, content = vllm_files("phi-3-mini")[0]
    run = parse_vllm_result(name, content)
    assert run.model == "phi-3-mini"
    assert run.p99_latency_ms == pytest.approx(723.05)
    assert run.p99_ttft_ms == pytest.approx(224.1455)
    assert run.request_rate == 3.0
    assert (run.completed, run.failed) == (1798, 2)
    assert run.ended_at == "2025-06-11T14:30:08"
    assert run.started_at == "2025-06-11T14:20:05"
    assert run.duration_s == pytest.approx(602.47)


def test_a_rate_of_inf_and_a_result_without_e2el_are_read_as_unknown():
    name, content = vllm_files("phi-3-mini")[0]
    data = json.loads(content)
    data["request_rate"] = "inf"
    del data["p99_e2el_ms"]
    run = parse_vllm_result(name, json.dumps(data))
    assert run.request_rate is None
    assert run.rate == pytest.approx(data["request_throughput"])
    assert run.p99_latency_ms is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json", "not JSON"),
        (b'{"completed": 3}', "no 'model_id'"),
        (b'{"model_id": "m"}', "no 'completed'"),
        (b'{"model_id": "m", "completed": "many"}', "'completed' is 'many', not a number"),
        (b'{"model_id": "m", "completed": 3, "date": "yesterday"}', "not YYYYmmdd-HHMMSS"),
    ],
)
def test_files_that_are_not_vllm_results_are_refused_by_name(content, message):
    with pytest.raises(LoadTestFormatError, match=message) as error:
        parse_vllm_result("x.json", content)
    assert str(error.value).startswith("x.json")


def test_the_csv_gives_each_model_its_p99_and_each_card_its_peak():
    path = LOADTESTS / "combined-a100-node-1.csv"
    run = parse_csv(path.name, path.read_bytes())
    assert {m.model: m.p99_latency_ms for m in run.models}["phi-3-mini"] == 723.1
    assert {m.model: m.request_rate for m in run.models}["bge-large-fp16"] == 12.0
    assert run.card_peaks == {CARD: round(74.5 * GIB)}
    with pytest.raises(LoadTestFormatError, match="header lacks card_peak_gib"):
        parse_csv("bad.csv", "model,card,p99_latency_ms\nm,c,1\n")
    with pytest.raises(LoadTestFormatError, match=r"bad\.csv line 2: p99_latency_ms 'fast'"):
        parse_csv("bad.csv", "model,card,p99_latency_ms,card_peak_gib\nm,c,fast,1\n")


def test_card_peaks_and_combination_rules():
    assert parse_card_peaks("# measured by dcgm\na100-node:0, 71\n") == {"a100-node:0": 71 * GIB}
    with pytest.raises(LoadTestFormatError, match="card peaks line 1"):
        parse_card_peaks("71.5")
    twice = vllm_files("phi-3-mini") * 2
    with pytest.raises(LoadTestFormatError, match="are both results for phi-3-mini"):
        combine(twice)
    csv = LOADTESTS / "combined-a100-node-1.csv"
    with pytest.raises(LoadTestFormatError, match="upload it alone"):
        combine([(csv.name, csv.read_bytes()), *vllm_files("phi-3-mini")])


def test_the_combined_test_passes_and_says_which_card_came_closest():
    outcome = gate(combine(vllm_files(), PEAKS))
    assert outcome.status is GateStatus.PASS, outcome.reasons
    assert [row["real_share"] for row in outcome.numbers["ratio"]] == pytest.approx(
        [4 / 25, 6 / 25, 12 / 25, 3 / 25]
    )
    first = outcome.numbers["first_bound"]
    assert first["card"] == CARD
    assert first["ratio"] == pytest.approx(74.5 / 76)
    assert "a100-node:1 came closest to its bound: memory: peak 74.5 GiB of 76.0 GiB (98%)" in (
        english(outcome.summary)
    )


def test_a_csv_without_a_window_cannot_have_its_peaks_checked_and_fails():
    path = LOADTESTS / "combined-a100-node-1.csv"
    outcome = gate(combine([(path.name, path.read_bytes())]), telemetry=Telemetry(None))
    assert outcome.status is GateStatus.FAIL
    assert codes(outcome) == ["no_window"]
    assert outcome.numbers["cards"][0]["declared_bytes"] == round(74.5 * GIB)
    assert outcome.numbers["cards"][0]["peak_bytes"] is None


def test_a_result_without_telemetry_for_its_window_fails_with_that_reason():
    outcome = gate(combine(vllm_files(), PEAKS), telemetry=Telemetry(WINDOW, {}))
    assert outcome.status is GateStatus.FAIL
    assert codes(outcome) == ["no_telemetry"]
    assert outcome.reasons[0].params["card"] == CARD


def test_self_declared_peaks_above_the_measured_ones_fail_and_the_measured_count():
    measured = Telemetry(WINDOW, {CARD: 60 * GIB})
    outcome = gate(combine(vllm_files(), f"{CARD},74.5"), telemetry=measured)
    assert outcome.status is GateStatus.FAIL
    assert codes(outcome) == ["declared_peak_mismatch"]
    params = outcome.reasons[0].params
    assert (params["declared_bytes"], params["measured_bytes"]) == (round(74.5 * GIB), 60 * GIB)
    assert outcome.numbers["cards"][0]["peak_bytes"] == 60 * GIB
    sources = outcome.evidence
    assert english(sources["card_peaks"]).startswith("the console's telemetry samples from")
    assert render_in(sources["card_peaks"], "zh-hans").startswith("控制台在 ")
    assert render_in(sources["declared_card_peaks"], "zh-hans") == "随导入一并填写，仅作核对"


def test_a_typed_in_peak_below_the_bound_does_not_hide_a_measured_one_above_it():
    measured = Telemetry(WINDOW, {CARD: 77 * GIB})
    outcome = gate(combine(vllm_files(), f"{CARD},70"), telemetry=measured)
    assert set(codes(outcome)) == {"declared_peak_mismatch", "card_over_bound"}


def test_a_100_to_0_01_ratio_fails_with_that_reason():
    run = combine(vllm_files("qwen2-7b", "phi-3-mini"), PEAKS)
    skewed = tuple(
        dataclasses.replace(m, request_rate=100.0 if m.model == "qwen2-7b-q4" else 0.01)
        for m in run.models
    )
    models = tuple(m for m in colocated() if m.name in ("qwen2-7b-q4", "phi-3-mini"))
    outcome = gate(dataclasses.replace(run, models=skewed), models=models)
    assert outcome.status is GateStatus.FAIL
    assert set(codes(outcome)) == {"ratio_off"}
    shares = {row["model"]: row["test_share"] for row in outcome.numbers["ratio"]}
    assert shares["phi-3-mini"] == pytest.approx(0.01 / 100.01)


def test_a_ratio_that_cannot_be_checked_fails():
    outcome = gate(combine(vllm_files(), PEAKS), models=colocated(rates={}))
    assert outcome.status is GateStatus.FAIL
    assert codes(outcome) == ["ratio_unverifiable"]


def test_a_single_model_result_is_rejected_with_that_reason():
    outcome = gate(combine(vllm_files("phi-3-mini"), PEAKS))
    assert outcome.status is GateStatus.FAIL
    assert english(outcome.summary).startswith(
        "Single-model result: only phi-3-mini was tested, and a single-model test counts for "
        "nothing; drive all 4 co-located models"
    )


def test_a_latency_over_its_slo_fails_and_that_card_reaches_its_bound_first():
    outcome = gate(combine(vllm_files(), PEAKS), models=colocated(slo=700))
    assert outcome.status is GateStatus.FAIL
    assert "phi-3-mini: P99 723 ms is over its 700 ms SLO." in map(english, outcome.reasons)
    assert english(outcome.numbers["first_bound"]["detail"]).startswith(
        "latency: phi-3-mini P99 723 ms"
    )
    assert "a100-node:1 reached its bound first" in english(outcome.summary)


def test_memory_over_the_bound_fails():
    outcome = gate(combine(vllm_files(), f"{CARD},77"), Telemetry(WINDOW, {CARD: 77 * GIB}))
    assert outcome.status is GateStatus.FAIL
    assert any(
        "memory peaked at 77.0 GiB, over its bound of 76.0 GiB" in r
        for r in map(english, outcome.reasons)
    )


def test_runs_that_did_not_overlap_were_not_a_combined_test():
    run = combine(vllm_files(), PEAKS)
    late = [
        dataclasses.replace(m, started_at="2025-06-11T15:00:00", ended_at="2025-06-11T15:10:00")
        if m.model == "phi-3-mini"
        else m
        for m in run.models
    ]
    outcome = gate(dataclasses.replace(run, models=tuple(late)))
    assert outcome.status is GateStatus.FAIL
    assert "not run at once" in english(outcome.summary)


def test_a_test_off_the_real_traffic_ratio_fails():
    outcome = gate(combine(vllm_files(), PEAKS), models=colocated(rates=RATES | {"phi-3-mini": 9}))
    assert outcome.status is GateStatus.FAIL
    assert any(
        "phi-3-mini got 12% of the test's requests but 29%" in r
        for r in map(english, outcome.reasons)
    )


def test_missing_models_and_card_peaks_fail():
    outcome = gate(combine(vllm_files("qwen2-7b", "phi-3-mini")))
    assert outcome.status is GateStatus.FAIL
    assert "Not in the combined test: qwen2-14b-q4, bge-large-fp16." in map(
        english, outcome.reasons
    )
    assert english(gate(None).summary).startswith("No combined load test: drive")
    assert codes(gate(None)) == ["no_result"]


@pytest.mark.django_db
def test_an_attached_single_model_result_fails_gate_4_of_the_seed_proposal(personas):
    host = seed_host()
    card = host.gpus.get(index=1)
    proposal = _phi_on(card, personas)
    services.do_attach_load_test(
        proposal,
        acting_user=personas["oncall"],
        run=combine(vllm_files("phi-3-mini"), PEAKS),
        files=["phi.json"],
    )
    outcome = check_load_test(proposal, [card], timezone.now())
    assert outcome.status is GateStatus.FAIL
    assert english(outcome.summary).startswith("Single-model result: only phi-3-mini was tested")
    assert codes(outcome) == ["single_model"]
    assert outcome.numbers["colocated"] == [
        "phi-3-mini",
        "bge-large-fp16",
        "qwen2-14b-q4",
        "qwen2-7b-q4",
    ]
    services.do_attach_load_test(
        proposal,
        acting_user=personas["oncall"],
        run=combine(vllm_files(), PEAKS),
        files=[name for name, _ in vllm_files()],
    )
    outcome = check_load_test(proposal, [card], timezone.now())
    # The run of June 2025 has no telemetry here: its typed-in peak is not taken on trust;
    # the seed host has no engine history, so the co-tenants' real rates are unknown.
    assert outcome.status is GateStatus.FAIL
    assert set(codes(outcome)) == {"no_telemetry", "ratio_unverifiable"}
    assert english(outcome.numbers["run"]).startswith("attached by oncall at ")
    assert render_in(outcome.numbers["run"], "zh-hans").startswith("由 oncall 于 ")


@pytest.mark.django_db
def test_an_import_with_telemetry_of_its_window_passes_on_the_measured_peak(personas):
    host = seed_host()
    card = host.gpus.get(index=1)
    proposal = _phi_on(card, personas)
    run, files = recent_combined_import(card)
    services.do_attach_load_test(proposal, acting_user=personas["oncall"], run=run, files=files)
    outcome = check_load_test(proposal, [card], timezone.now())
    assert outcome.status is GateStatus.PASS, outcome.reasons
    assert english(outcome.numbers["cards"][0]["peak_source"]) == "console telemetry"
    assert english(outcome.evidence["latency"]) == "imported: vllm-json"
    assert render_in(outcome.evidence["latency"], "zh-hans") == "导入：vllm-json"


def measured_run(rates: dict[str, float]) -> LoadTestRun:
    models = tuple(
        dataclasses.replace(m, source="console runner", request_rate=rates[m.model])
        for m in combine(vllm_files(), PEAKS).models
    )
    return LoadTestRun("measured", models, {CARD: round(74.5 * GIB)})


def test_a_console_run_on_other_cards_or_isolation_is_not_the_placement_proposed():
    models = tuple(dataclasses.replace(m, isolation="time_slicing") for m in colocated())
    request = LoadTestRequest(
        models,
        {CARD: 76 * GIB},
        measured_run(RATES),
        telemetry=MEASURED,
        tested_placement={
            "cards": ["a100-node:2"],
            "isolation": {"phi-3-mini": "mps", "qwen2-7b-q4": "time_slicing"},
        },
        run_status="done",
    )
    outcome = evaluate_load_test(request)
    assert codes(outcome) == ["placement_differs", "isolation_differs"]
    assert outcome.reasons[1].params == {
        "model": "phi-3-mini",
        "tested": "mps",
        "proposed": "time_slicing",
    }
    # The typed-in peaks of an import are checked; a console run has none to check.
    assert outcome.numbers["cards"][0]["declared_bytes"] is None
    assert english(outcome.evidence["latency"]) == "the console's runner"
    assert render_in(outcome.evidence["rates"], "zh-hans") == "控制台的压测执行器（保持阶段）"


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_a_console_run_that_did_not_finish_counts_for_nothing(status):
    request = LoadTestRequest(
        colocated(), {CARD: 76 * GIB}, measured_run(RATES), telemetry=MEASURED, run_status=status
    )
    outcome = evaluate_load_test(request)
    assert outcome.status is GateStatus.FAIL
    assert outcome.reasons == (Reason("gate.load_test.run_not_finished", {"status": status}),)


def test_the_first_bound_in_time_order_wins_over_the_closest_ratio():
    first = {
        "kind": "latency",
        "model": "qwen2-7b-q4",
        "cards": [CARD],
        "p99_ms": 900.0,
        "slo_ms": 800,
        "at": "2025-06-11T14:22:00+00:00",
        "load_rps": {"qwen2-7b-q4": 6.0},
    }
    request = LoadTestRequest(
        colocated(),
        {CARD: 76 * GIB},
        measured_run(RATES),
        telemetry=MEASURED,
        run_status="done",
        measured_first_bound=first,
    )
    bound = evaluate_load_test(request).numbers["first_bound"]
    assert bound["in_time_order"]
    assert english(bound["detail"]).startswith(
        "latency: qwen2-7b-q4 P99 900 ms of 800 ms at 2025-06-11"
    )


def _engine_history(card, rates: dict[str, float], start, minutes: int) -> None:
    """`minutes` of engine minutes of the card's tenants from `start`, at `rates` (per s)."""
    import datetime as dt

    from inventory.ingest.writer import ingest_batches
    from inventory.timeseries import rollups
    from tests.batches import batch, engine_row

    batches = []
    for minute in range(minutes):
        at = (start + dt.timedelta(minutes=minute)).timestamp()
        engines = []
        for deployment in card.deployments.select_related("served_model"):
            row = engine_row(deployment, running=4, p99_s=0.5)
            row["latency"]["e2e"]["count"] = rates[deployment.served_model.name] * 60
            engines.append(row)
        batches.append(batch(card.host, start=at, end=at + 60, engines=engines))
    assert all(hasattr(r, "batch_id") for r in ingest_batches(batches))
    rollups.refresh_all()


@pytest.mark.django_db
def test_a_console_run_is_held_to_the_traffic_it_was_built_from_not_its_own(personas):
    import datetime as dt

    from console.proposals.models import LoadTest

    host = seed_host()
    card = host.gpus.get(index=1)
    proposal = _phi_on(card, personas)
    started = timezone.now().replace(second=0, microsecond=0) - dt.timedelta(minutes=5)
    # Before the test, the production mix; while it ran, the engines also counted the test's
    # requests, and one tenant's own traffic was five times as high.
    _engine_history(card, RATES, started - dt.timedelta(minutes=20), 20)
    _engine_history(card, RATES | {"bge-large-fp16": 60.0}, started, 4)
    LoadTest.objects.create(
        proposal=proposal,
        uploaded_by=personas["oncall"],
        source_format=LoadTest.Format.MEASURED,
        files=["combined test"],
        status=LoadTest.Status.DONE,
        run=measured_run(RATES).to_json(),
        window_start=started,
        window_end=started + dt.timedelta(minutes=4),
    )
    outcome = check_load_test(proposal, [card], timezone.now())
    assert "ratio_off" not in codes(outcome), outcome.reasons
    assert "ratio_unverifiable" not in codes(outcome)
    # An imported result is held to the traffic as it is now, which is off by then.
    LoadTest.objects.update(source_format=LoadTest.Format.VLLM_JSON)
    assert "ratio_off" in codes(check_load_test(proposal, [card], timezone.now()))


@pytest.mark.django_db
def test_a_console_run_is_held_to_the_real_traffic_its_plan_was_made_from(personas):
    import datetime as dt

    from console.proposals.loadtest.plan import Api, LoadTestPlan, Phases, RequestMix, Target
    from console.proposals.models import LoadTest

    host = seed_host()
    card = host.gpus.get(index=1)
    proposal = _phi_on(card, personas)
    started = timezone.now().replace(second=0, microsecond=0) - dt.timedelta(minutes=5)
    # The minutes the history holds by now say another mix than the plan measured (late
    # batches of the minutes before the test, the test's own requests in its first minute).
    _engine_history(card, RATES | {"bge-large-fp16": 60.0}, started - dt.timedelta(minutes=20), 24)
    tenants = card.deployments.select_related("served_model")
    plan = LoadTestPlan(
        host.name,
        tuple(
            Target(
                name=d.served_model.name,
                deployment=f"{d.served_model.name} #{d.pk}",
                url="http://127.0.0.1:9/",
                api=Api.COMPLETIONS,
                rate_rps=RATES[d.served_model.name] / 2,  # a test at half the busy hour
                rate_source="telemetry x 0.5",
                slo_ms=None,
                cards=(CARD,),
                isolation=d.isolation_mode,
                deployment_id=d.pk,
                real_rps=RATES[d.served_model.name],
            )
            for d in tenants
        ),
        RequestMix(),
        Phases(),
    )
    test = LoadTest.objects.create(
        proposal=proposal,
        uploaded_by=personas["oncall"],
        source_format=LoadTest.Format.MEASURED,
        files=["combined test"],
        status=LoadTest.Status.DONE,
        plan=plan.to_json(),
        run=measured_run(RATES).to_json(),
        window_start=started,
        window_end=started + dt.timedelta(minutes=4),
    )
    outcome = check_load_test(proposal, [card], timezone.now())
    assert not {"ratio_off", "ratio_unverifiable"} & set(codes(outcome)), outcome.reasons
    LoadTest.objects.filter(pk=test.pk).update(plan=None)  # without its plan: the history
    assert "ratio_off" in codes(check_load_test(proposal, [card], timezone.now()))
