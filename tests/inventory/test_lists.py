"""The fleet board's and the hosts and OOM APIs' filters and pages."""

import datetime as dt
import uuid

import pytest
from django.utils import timezone

from console.core.pagination import PAGE_SIZE
from inventory.models import Event, Host
from tests.factories import DeploymentFactory, GpuFactory, HostFactory
from tests.lists import api_page, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def api_client(personas):
    return token_client(personas["manager"])


@pytest.fixture
def hosts():
    return {
        "infer": HostFactory(name="infer-01", labels={"rack": "r12"}),
        "edge": HostFactory(name="edge-02", address="10.0.0.2", status=Host.Status.MAINTENANCE),
        "spare": HostFactory(name="spare-03", status=Host.Status.MAINTENANCE),
    }


def _board(client, **params) -> list[str]:
    response = client.get("/", params)
    assert response.status_code == 200
    return [row.host.name for row in response.context["rows"]]


def test_the_board_filters_by_status_search_and_label(client_as, hosts):
    client = client_as("oncall")
    assert _board(client) == ["edge-02", "infer-01", "spare-03"]
    assert _board(client, status="maintenance") == ["edge-02", "spare-03"]
    assert _board(client, q="10.0.0") == ["edge-02"]
    assert _board(client, label="rack:r12") == ["infer-01"]
    assert _board(client, label="rack") == ["infer-01"]
    assert _board(client, label="rack:r13") == []


def test_a_bad_board_filter_is_ignored_and_said_so(client_as, hosts):
    response = client_as("oncall").get("/", {"status": "melting", "sort": "mood"})
    assert response.status_code == 200
    assert [row.host.name for row in response.context["rows"]] == [
        "edge-02",
        "infer-01",
        "spare-03",
    ]
    page = response.content.decode()
    assert 'id="filter-errors"' in page
    assert "status (" in page and "sort (" in page


def test_the_partial_refresh_keeps_the_filters(client_as, hosts):
    response = client_as("oncall").get("/", {"status": "maintenance", "partial": "1"})
    rows = response.content.decode()
    assert "<html" not in rows
    assert 'data-host="edge-02"' in rows and 'data-host="infer-01"' not in rows


def test_the_hosts_api_filters_and_answers_400_on_a_bad_value(api_client, hosts):
    answer = api_page(api_client, "/api/hosts/", {"status": "maintenance"})
    assert [host["name"] for host in answer["results"]] == ["edge-02", "spare-03"]
    assert api_page(api_client, "/api/hosts/", {"q": "infer"})["count"] == 1
    response = api_client.get("/api/hosts/", {"status": "melting"})
    assert response.status_code == 400
    assert "status" in response.json()


def test_the_hosts_api_pages_past_the_first_and_keeps_the_filter(api_client, hosts):
    first = api_page(api_client, "/api/hosts/", {"status": "maintenance", "page_size": 1})
    assert first["count"] == 2 and first["previous"] is None
    assert "status=maintenance" in first["next"] and "page=2" in first["next"]
    second = api_client.get(first["next"]).json()
    assert [host["name"] for host in second["results"]] == ["spare-03"]
    assert second["next"] is None


def test_the_hosts_api_lists_every_host_a_page_at_a_time(api_client):
    HostFactory.create_batch(PAGE_SIZE + 1)
    first = api_page(api_client, "/api/hosts/")
    assert first["count"] == PAGE_SIZE + 1
    assert len(first["results"]) == PAGE_SIZE
    assert len(api_client.get(first["next"]).json()["results"]) == 1


def _oom(host, at, **fields):
    return Event.objects.create(
        host=host, kind=Event.Kind.OOM, at=at, batch_id=uuid.uuid4(), position=0, **fields
    )


def test_the_oom_api_lists_the_window_narrowed_by_host_and_cause(api_client, hosts):
    gpu = GpuFactory(host=hosts["infer"], index=3)
    deployment = DeploymentFactory(host=hosts["infer"], gpus=[gpu])
    now = timezone.now()
    newest = _oom(hosts["infer"], now, gpu=gpu, deployment=deployment, cause="fragmentation")
    _oom(hosts["edge"], now - dt.timedelta(days=1), cause="true_peak")
    _oom(hosts["edge"], now - dt.timedelta(weeks=20), cause="true_peak")
    Event.objects.create(
        host=hosts["edge"], kind=Event.Kind.XID, at=now, batch_id=uuid.uuid4(), position=0
    )
    answer = api_page(api_client, "/api/oom/")
    assert answer["count"] == 2
    assert answer["results"][0] == {
        "id": newest.pk,
        "at": answer["results"][0]["at"],
        "host": "infer-01",
        "card": 3,
        "model": deployment.served_model.name,
        "cause": "fragmentation",
        "cause_explanation": "",
    }
    assert api_page(api_client, "/api/oom/", {"weeks": 26})["count"] == 3
    assert api_page(api_client, "/api/oom/", {"host": "edge-02"})["results"][0]["model"] is None
    assert api_page(api_client, "/api/oom/", {"cause": "fragmentation"})["count"] == 1


@pytest.mark.parametrize(
    "params", [{"weeks": 3}, {"cause": "gremlins"}, {"host": "no-such-host"}, {"page": "x"}]
)
def test_the_oom_api_answers_400_or_404_on_a_bad_value(api_client, hosts, params):
    response = api_client.get("/api/oom/", params)
    assert response.status_code == (404 if "page" in params else 400)


def test_the_oom_api_pages_keep_the_filters(api_client, hosts):
    now = timezone.now()
    for hours in range(3):
        _oom(hosts["edge"], now - dt.timedelta(hours=hours), cause="true_peak")
    _oom(hosts["infer"], now, cause="true_peak")
    first = api_page(api_client, "/api/oom/", {"host": "edge-02", "page_size": 2})
    assert first["count"] == 3
    assert "host=edge-02" in first["next"]
    second = api_client.get(first["next"]).json()
    assert [event["host"] for event in second["results"]] == ["edge-02"]


def test_the_csv_export_follows_the_same_filters(client_as, hosts):
    now = timezone.now()
    _oom(hosts["edge"], now, cause="true_peak")
    _oom(hosts["infer"], now, cause="fragmentation")
    response = client_as("manager").get("/oom/export.csv", {"cause": "fragmentation"})
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert len(lines) == 2 and "infer-01" in lines[1]


def test_the_schema_documents_the_filters_and_the_pages(api_client):
    schema = api_client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    oom = schema["paths"]["/api/oom/"]["get"]
    assert {p["name"] for p in oom["parameters"]} == {
        "weeks",
        "host",
        "model",
        "cause",
        "page",
        "page_size",
    }
    paged = schema["components"]["schemas"]["PaginatedOomEventList"]["properties"]
    assert set(paged) == {"count", "next", "previous", "results"}
    hosts = schema["paths"]["/api/hosts/"]["get"]
    assert {p["name"] for p in hosts["parameters"]} >= {"status", "q", "label", "page"}
