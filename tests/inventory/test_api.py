"""The telemetry JSON API: hosts now, series at a step, clear 400s."""

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from inventory.ingest.writer import ingest_batch
from inventory.timeseries import rollups
from tests.batches import GIB, batch, card_row, process_row
from tests.factories import DeploymentFactory, GpuFactory
from tests.tokens import token_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(personas):
    client = APIClient()
    token = token_for(personas["manager"])
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


@pytest.fixture
def telemetry():
    gpu0 = GpuFactory(index=0)
    gpu1 = GpuFactory(index=1, host=gpu0.host)
    deployment = DeploymentFactory(host=gpu0.host, gpus=[gpu0])
    now = timezone.now().replace(microsecond=0)
    for minute in range(10):
        end = (now - dt.timedelta(minutes=9 - minute)).timestamp()
        used = (40 + minute) * GIB
        ingest_batch(
            batch(
                gpu0.host,
                start=end - 60,
                end=end,
                cards=[
                    card_row(gpu0, used_max=used + 5 * GIB, used_last=used),
                    card_row(gpu1, used_max=GIB, used_last=GIB),
                ],
                processes=[
                    process_row(gpu0, 77, used_max=used, used_last=used, deployment=deployment)
                ],
            )
        )
    rollups.refresh_all()
    return {"host": gpu0.host, "gpu0": gpu0, "deployment": deployment, "now": now}


def test_hosts_lists_each_card_now_and_the_collectors_health(api, telemetry):
    answer = api.get("/api/hosts/").json()
    (host,) = answer["results"]
    assert host["name"] == telemetry["host"].name
    cards = {card["index"]: card for card in host["cards"]}
    assert cards[0]["used_bytes"] == 49 * GIB
    assert cards[0]["free_bytes"] == cards[0]["total_bytes"] - cards[0]["reserved_bytes"] - 49 * GIB
    assert cards[1]["used_bytes"] == GIB
    assert host["collector"]["batches"] == 10
    assert host["collector"]["stale"] is False


def test_samples_keep_the_peak_at_any_step(api, telemetry):
    host = telemetry["host"].name
    start = (telemetry["now"] - dt.timedelta(minutes=15)).isoformat()
    answer = api.get(f"/api/hosts/{host}/samples/", {"gpu": 0, "from": start, "step": 3600}).json()
    assert answer["source"] == "1h"
    (card,) = answer["cards"]
    peak = max(point["used_max"] for point in card["points"])
    assert peak == 54 * GIB  # the last interval's max, not an average
    (process,) = answer["processes"]
    assert process["pid"] == 77
    assert process["deployment"] == telemetry["deployment"].pk


def test_fine_steps_read_raw_samples(api, telemetry):
    host = telemetry["host"].name
    start = (telemetry["now"] - dt.timedelta(minutes=15)).isoformat()
    answer = api.get(f"/api/hosts/{host}/samples/", {"from": start, "step": 10}).json()
    assert answer["source"] == "raw"
    assert {card["index"] for card in answer["cards"]} == {0, 1}
    assert len(answer["cards"][0]["points"]) == 10


@pytest.mark.parametrize(
    ("query", "field", "reason"),
    [
        ({"from": "2026-11-30T12:00:00Z", "to": "2026-11-30T11:00:00Z"}, "from", "before to"),
        ({"gpu": 7}, "gpu", "has no card 7"),
        ({"from": "yesterday"}, "from", "Datetime has wrong format"),
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-11-30T00:00:00Z", "step": 60}, "step",
         "too fine"),
        ({"step": 0}, "step", "greater than or equal to 1"),
    ],
)  # fmt: skip
def test_bad_queries_are_400_with_the_reason(api, telemetry, query, field, reason):
    response = api.get(f"/api/hosts/{telemetry['host'].name}/samples/", query)
    assert response.status_code == 400
    assert reason in str(response.json()[field])


def test_an_unknown_host_is_404(api, telemetry):
    assert api.get("/api/hosts/nope/samples/").status_code == 404


def test_anonymous_gets_401_and_a_role_less_token_403(personas):
    client = APIClient()
    assert client.get("/api/hosts/").status_code == 401
    token = token_for(personas["outsider"])
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/hosts/").status_code == 403


def test_the_openapi_schema_documents_the_api(api):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    samples = schema["paths"]["/api/hosts/{name}/samples/"]["get"]
    assert {p["name"] for p in samples["parameters"]} >= {"name", "gpu", "from", "to", "step"}
    assert "/api/hosts/" in schema["paths"]
