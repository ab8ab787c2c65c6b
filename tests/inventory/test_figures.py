"""One number per figure: the same data gives the same headroom, KV gap and OOM count on the
host page, in the API, on the fleet board, in /metrics and in the gates."""

import datetime as dt
import math

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from console.proposals.gate_checks import _recent_ooms, check_kv
from inventory.analytics.stats import percentile
from inventory.models import Deployment, Event
from inventory.timeseries import queries
from tests.batches import GIB, write_history
from tests.console.proposals.support import create_proposal
from tests.console.proposals.test_kv_gate import _write_engine_minutes
from tests.factories import DeploymentFactory, GpuFactory, ServedModelFactory
from tests.tokens import token_for

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
    token = token_for(personas["manager"])
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Token {token}")
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
    card = (("Hostname", host.name), ("UUID", gpu.uuid), ("device", "nvidia0"), ("gpu", "0"),
            ("modelName", gpu.product_name))  # fmt: skip
    assert metrics[("gpu_console_card_headroom_bytes", card)] == headroom
    kv_labels = (("Hostname", host.name), ("deployment", str(deployment.pk)), ("model", "chat"))
    assert metrics[("gpu_console_kv_reservation_gap_bytes", kv_labels)] == gap

    assert board.ooms_24h == 1
    # /metrics counts every stored OOM (a counter), not the board's last 24 hours.
    whole_card = (("GPU_I_ID", ""), ("GPU_I_PROFILE", ""), *card)
    assert metrics[("gpu_console_oom_events_total", tuple(sorted(whole_card)))] == 2
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


MLA_V3 = {"num_layers": 61, "uses_mla": True, "kv_lora_rank": 512, "qk_rope_head_dim": 64}
LLAMA_70B = {"num_layers": 80, "num_kv_heads": 8, "head_dim": 128}


@pytest.mark.parametrize(
    ("shape", "cards", "pipeline", "share"),
    [
        # DeepSeek-V3 config.json: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64. The MLA
        # latent is whole on every TP rank (vLLM get_num_kv_heads: 1 under MLA).
        (MLA_V3, 8, 1, 1),
        # Meta-Llama-3-70B config.json: 80 layers, 8 KV heads of 128. TP=8: one head a card.
        (LLAMA_70B, 8, 1, 1 / 8),
        # TP=16 over 8 heads: each head on two cards, so still an eighth a card.
        (LLAMA_70B, 16, 1, 1 / 8),
        # TP=4 x PP=2 over 80 layers: 2 heads of 8 on each card, 40 of 80 layers.
        (LLAMA_70B, 8, 2, 1 / 8),
    ],
)
def test_kv_per_card_is_one_number_in_the_ledger_the_gate_the_advisor_and_metrics(
    client, personas, shape, cards, pipeline, share
):
    from console.proposals.gate_checks import share_of
    from inventory.analytics.kv_advisor import KvDemandSample, advise_kv_reservation
    from inventory.reports.ledger import card_views

    fields = {"num_kv_heads": None, "head_dim": None} | shape
    model = ServedModelFactory(name="big", kv_dtype="bf16", weights_bytes=cards * GIB, **fields)
    first = GpuFactory(host__name="tp-01", index=0, memory_total_bytes=141 * GIB)
    gpus = [first] + [
        GpuFactory(host=first.host, index=i, memory_total_bytes=141 * GIB) for i in range(1, cards)
    ]
    reservation = 64 * GIB
    deployment = DeploymentFactory(
        host=gpus[0].host, gpus=gpus, served_model=model, kv_reservation_bytes=reservation,
        pipeline_parallel=pipeline,
    )  # fmt: skip
    expected = math.ceil(reservation * share)
    assert deployment.kv_per_card().bytes == expected

    for view in card_views(gpus[0].host):
        kv = [line.bytes for line in view.ledger.lines if line.kind.value.startswith("kv_cache")]
        assert kv == [expected]

    advice = advise_kv_reservation(
        "big", [KvDemandSample(0.0, 1.0)], current_reservation_bytes=reservation,
        bytes_per_token=model.effective_kv_bytes_per_token, tokens_per_request=1,
        shape=model.kv_shape(), tensor_parallel=deployment.tensor_parallel,
        pipeline_parallel=pipeline,
    )  # fmt: skip
    assert advice.current_per_card_bytes == expected

    metrics = _metrics(client, personas)
    labels = (("Hostname", "tp-01"), ("basis", "shape"), ("deployment", str(deployment.pk)),
              ("model", "big"))  # fmt: skip
    assert metrics[("gpu_console_kv_reservation_per_card_bytes", labels)] == expected

    if pipeline == 1:  # a proposal states no pipeline stages
        proposal = create_proposal(
            personas["oncall"], host=gpus[0].host, gpus=gpus, model=model,
            kv_reservation_bytes=reservation,
        )  # fmt: skip
        assert share_of(proposal, cards).kv_bytes == expected
