"""Gate 2: the KV reservation covers P95 concurrency plus the buffer, and has a plan above it."""

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

from console.proposals.gate_checks import check_kv
from console.proposals.gates import GateStatus
from console.proposals.gates.kv import Concurrency, KvRequest, evaluate_kv
from inventory.timeseries import partitions, rollups
from tests.console.proposals.support import codes_of, create_proposal, english
from tests.factories import GIB, DeploymentFactory, GpuFactory

KIB = 1024
PER_TOKEN = 128 * KIB  # Llama-3-8B in bf16


def request(**overrides) -> KvRequest:
    fields = {
        "model": "llama-3-8b",
        "basis": "p95",
        "reservation_bytes": 6 * GIB,
        "admission_policy": "queue",
        "buffer": 0.2,
        "bytes_per_token": PER_TOKEN,
        "tokens_per_request": 4096,
        "concurrency": Concurrency(p95=9.3, source="stated in the proposal"),
    }
    return KvRequest(**(fields | overrides))


def test_a_p95_reservation_with_a_policy_passes():
    outcome = evaluate_kv(request())
    assert outcome.status is GateStatus.PASS
    # ceil(9.3) = 10 requests x 4096 tokens x 128 KiB x 1.2 = 6 GiB exactly.
    assert outcome.numbers["required_bytes"] == 6 * GIB
    assert outcome.numbers["sized_requests"] == 10
    assert outcome.summary.code == "gate.kv.covered"
    assert "ceil(P95 9.3) = 10 requests" in english(outcome.summary)


def test_a_mean_based_reservation_fails_whatever_its_size():
    outcome = evaluate_kv(request(basis="mean", reservation_bytes=12 * GIB))
    assert outcome.status is GateStatus.FAIL
    assert codes_of(outcome.reasons) == ["gate.kv.sized_at_mean"]
    assert english(outcome.reasons[0]) == (
        "The reservation is sized at the mean concurrency: a reservation at the mean counts as "
        "no reservation."
    )


def test_a_reservation_below_the_p95_need_fails_with_the_formula():
    outcome = evaluate_kv(request(reservation_bytes=6 * GIB - 1))
    assert outcome.status is GateStatus.FAIL
    assert outcome.reasons[0].code == "gate.kv.below_need"
    assert outcome.reasons[0].params["reservation"] == 6 * GIB - 1
    assert english(outcome.reasons[0]).startswith(
        "The reservation of 6.0 GiB is below the need: ceil(P95"
    )


def test_a_reservation_at_the_mean_level_is_called_one_even_when_labelled_p95():
    mean_level = Concurrency(p95=9.3, mean=4.0, source="history")
    # Mean need: 4 x 4096 x 128 KiB = 2 GiB; 2.1 GiB is within 10% of it.
    outcome = evaluate_kv(request(reservation_bytes=int(2.1 * GIB), concurrency=mean_level))
    assert outcome.status is GateStatus.FAIL
    assert "gate.kv.mean_level" in codes_of(outcome.reasons)


def test_a_missing_admission_policy_fails():
    outcome = evaluate_kv(request(admission_policy="none"))
    assert outcome.status is GateStatus.FAIL
    assert outcome.reasons[0].code == "gate.kv.no_policy"


def test_a_peak_based_reservation_is_sized_on_the_peak():
    concurrency = Concurrency(p95=9.3, peak=14.2, source="history")
    outcome = evaluate_kv(request(basis="peak", concurrency=concurrency))
    assert outcome.status is GateStatus.FAIL
    assert outcome.numbers["sized_on"] == "peak"
    assert outcome.numbers["sized_requests"] == 15


def test_unknown_concurrency_asks_for_the_expected_p95():
    outcome = evaluate_kv(request(concurrency=None))
    assert outcome.status is GateStatus.FAIL
    assert outcome.reasons[0].code == "gate.kv.concurrency_unknown"


@pytest.mark.django_db
def test_a_mean_based_reservation_fails_gate_2_of_a_proposal(personas):
    proposal = create_proposal(personas["oncall"], kv_reservation_basis="mean")
    outcome = check_kv(proposal, timezone.now())
    assert outcome.status is GateStatus.FAIL
    assert outcome.summary.code == "gate.kv.sized_at_mean"


def _write_engine_minutes(deployment, now, running):
    partitions.ensure_partitions(now - dt.timedelta(days=2), now)
    with connection.cursor() as cursor:
        for minute, value in enumerate(running):
            cursor.execute(
                "INSERT INTO inventory_engine_rollup_1m (deployment_id, bucket, samples, "
                "running_max, running_sum, running_count, requests) "
                "VALUES (%s, %s, 6, %s, %s, 6, 120)",
                [deployment.pk, now - dt.timedelta(minutes=minute + 1), value, value * 6 * 0.5],
            )
    rollups.pack_hours(now - dt.timedelta(minutes=len(running) + 1), now)  # as a refresh would


@pytest.mark.django_db
def test_history_of_the_deployment_decides_the_p95(personas):
    gpu = GpuFactory()
    deployment = DeploymentFactory(host=gpu.host, gpus=[gpu], kv_tokens_per_request=4096)
    now = timezone.now()
    # 100 minutes: peaks 1..100 running requests, so P95 = 95.05 and the mean is half of each.
    _write_engine_minutes(deployment, now, [float(n) for n in range(1, 101)])
    proposal = create_proposal(
        personas["oncall"],
        host=gpu.host,
        gpus=[gpu],
        model=deployment.served_model,
        action="resize",
        deployment=deployment,
        expected_p95_concurrency=None,
        kv_reservation_bytes=40 * GIB,
    )
    outcome = check_kv(proposal, now)
    assert outcome.numbers["p95_concurrency"] == pytest.approx(95.05)
    assert outcome.numbers["peak_concurrency"] == 100
    assert outcome.numbers["mean_concurrency"] == pytest.approx(25.25)
    assert outcome.numbers["samples"] == 100
    assert outcome.evidence["concurrency_source"]["code"] == "gate.kv.source_history"
    assert outcome.evidence["concurrency_source"]["params"]["peaks"] == 100
    # 96 x 4096 x 128 KiB x 1.2 = 57.6 GiB: 40 GiB is short.
    assert outcome.status is GateStatus.FAIL
    assert outcome.numbers["required_bytes"] == pytest.approx(57.6 * GIB, rel=1e-9)
