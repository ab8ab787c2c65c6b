"""One number per figure: the same data gives the same headroom, KV gap and OOM count on the
host page, in the API, on the fleet board, in /metrics and in the gates."""

import datetime as dt
import math

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.authtoken.models import Token

from console.proposals.gate_checks import _recent_ooms, check_kv
from inventory.analytics.stats import percentile
from inventory.models import Deployment, Event
from inventory.timeseries import queries
from tests.batches import GIB, write_history
from tests.factories import DeploymentFactory, GpuFactory, ServedModelFactory
from tests.proposals.support import create_proposal
from tests.proposals.test_kv_gate import _write_engine_minutes

pytestmark = pytest.mark.django_db

MINUTES = 60
PER_TOKEN = 128 * 1024  # the factory's Llama-3-8B shape in bf16
TOKENS = 1000
RESERVATION = 2 * GIB
DRIVER_RESERVED = 479 * 1024**2  # what tests.batches reports


def _running(minute: int) -> float:
    # Two one-minute bursts to 20 requests over a base of 3.0-3.4: the P95 of the minutes is
    # well below the hourly maxima, so a figure on another basis would not match.
    return 20.0 if minute in (10, 40) else 3.0 + (minute % 5) / 10


def _demand(minute: int) -> int:
    return (40 + minute % 7) * GIB  # peaks at 46 GiB


@pytest.fixture
def host():
    gpu = GpuFactory(host__name="figures-01", index=0, memory_total_bytes=80 * GIB)
    deployment = DeploymentFactory(
        host=gpu.host,
        gpus=[gpu],
        served_model=ServedModelFactory(name="chat"),
        kv_reservation_bytes=RESERVATION,
        kv_reservation_basis=Deployment.KvBasis.P95,
        kv_tokens_per_request=TOKENS,
    )
    start = (timezone.now() - dt.timedelta(minutes=MINUTES)).timestamp()
    write_history(gpu.host, [(gpu, deployment)], start=start, minutes=MINUTES,
                  demand=lambda m, i: _demand(m), running=lambda m, i: _running(m),
                  p99=lambda m, i: 0.3)  # fmt: skip
    for hours in (1, 30):  # one OOM in the last 24 hours, one before
        Event.objects.create(host=gpu.host, gpu=gpu, kind=Event.Kind.OOM,
                             at=timezone.now() - dt.timedelta(hours=hours),
                             batch_id=f"00000000-0000-4000-8000-0000000000{hours:02d}",
                             position=0)  # fmt: skip
    return gpu.host


def _metrics(client, personas) -> dict:
    token = Token.objects.create(user=personas["manager"])
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Token {token.key}")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def _expected_gap() -> int:
    # P95 by linear interpolation between closest ranks, worked out here on its own.
    ordered = sorted(_running(m) for m in range(MINUTES))
    rank = (len(ordered) - 1) * 0.95
    low = math.floor(rank)
    p95 = ordered[low] + (rank - low) * (ordered[low + 1] - ordered[low])
    return math.ceil(p95) * TOKENS * PER_TOKEN * 6 // 5 - RESERVATION


def test_headroom_kv_gap_and_ooms_are_one_number_everywhere(client, client_as, personas, host):
    gpu = host.gpus.get()
    deployment = host.deployments.get()
    # Every sample holds demand + 2 GiB the allocator keeps free: the peak is 48 GiB used.
    headroom = 80 * GIB - DRIVER_RESERVED - 48 * GIB
    gap = _expected_gap()
    assert gap == 4 * TOKENS * PER_TOKEN * 6 // 5 - RESERVATION  # ceil(3.4): 4 requests

    page = client_as("oncall").get(f"/hosts/{host.name}/")
    assert page.context["card_headroom"][gpu.pk] == headroom
    assert page.context["ledger_data"][0]["headroom_bytes"] == headroom
    ledger_api = client_as("manager").get(f"/api/hosts/{host.name}/ledger/").json()
    assert ledger_api[0]["headroom_bytes"] == headroom
    hosts_api = client_as("manager").get("/api/hosts/").json()["results"]
    (listed,) = [entry for entry in hosts_api if entry["name"] == host.name]
    assert listed["cards"][0]["headroom_bytes"] == headroom
    (board,) = [row for row in client_as("oncall").get("/").context["rows"] if row.host == host]
    assert board.largest_headroom_bytes == headroom

    analysis = client_as("oncall").get(f"/hosts/{host.name}/analysis/")
    assert analysis.context["kv_rows"][0].advice.gap_bytes == gap
    proposal = create_proposal(
        personas["oncall"],
        host=host,
        gpus=[gpu],
        model=deployment.served_model,
        action="resize",
        deployment=deployment,
        expected_p95_concurrency=None,
        kv_reservation_bytes=RESERVATION,
        kv_tokens_per_request=TOKENS,
    )
    assert check_kv(proposal, timezone.now()).numbers["gap_bytes"] == gap

    metrics = _metrics(client, personas)
    card = (("card", "0"), ("host", host.name))
    assert metrics[("gpu_console_card_headroom_bytes", card)] == headroom
    kv_labels = (("deployment", str(deployment.pk)), ("host", host.name), ("model", "chat"))
    assert metrics[("gpu_console_kv_reservation_gap_bytes", kv_labels)] == gap

    assert board.ooms_24h == 1
    assert metrics[("gpu_console_ooms_24h", (("host", host.name),))] == 1
    assert _recent_ooms([gpu], timezone.now()) == {str(gpu): 2}  # the gate looks back 7 days


@pytest.mark.parametrize("minutes", [1, 2, 61, 97, 300])
def test_the_p95_the_database_picks_is_the_percentile_of_all_the_minutes(minutes):
    deployment = DeploymentFactory()
    now = timezone.now()
    # Peaks in a scrambled order, with ties and fractions, so ranks and interpolation matter.
    _write_engine_minutes(deployment, now, [(m * 37 % 101) / 7 for m in range(minutes)])
    start = now - dt.timedelta(days=1)
    every_minute = [
        minute.running_max
        for minute in queries.engine_minutes([deployment.pk], start, now)[deployment.pk]
    ]
    assert len(every_minute) == minutes
    picked = queries.running_percentile([deployment.pk], start, now, 95)
    assert picked == {deployment.pk: percentile(every_minute, 95)}
