"""The audit trail's filters and pages, on /audit/ and GET /api/audit/."""

import uuid

import pytest
from django.contrib.contenttypes.models import ContentType

from console.core.models import AuditEntry
from console.core.pagination import PAGE_SIZE
from runbooks.models import RunbookNote
from tests.factories import HostFactory
from tests.lists import api_page, next_link, token_client

pytestmark = pytest.mark.django_db


def _entries(count, *, action="runbook.update", actor="oncall", host=None):
    note_type = ContentType.objects.get_for_model(RunbookNote)
    AuditEntry.objects.bulk_create(
        AuditEntry(
            change_id=uuid.uuid4(),
            actor_name=actor,
            action=action,
            content_type=note_type,
            object_id=str(n),
            object_repr=f"{action} {n}",
            host=host,
        )
        for n in range(count)
    )


def _listed(response) -> list[str]:
    assert response.status_code == 200
    return [entry.object_repr for entry in response.context["page"]]


def test_the_page_filters_by_action_actor_and_host(client_as):
    host = HostFactory(name="infer-01")
    _entries(2, action="runbook.update")
    _entries(1, action="deployment.change", actor="approver", host=host)
    client = client_as("manager")
    assert len(_listed(client.get("/audit/", {"action": "runbook"}))) == 2
    assert _listed(client.get("/audit/", {"actor": "approver"})) == ["deployment.change 0"]
    assert _listed(client.get("/audit/", {"host": "infer-01"})) == ["deployment.change 0"]


def test_a_bad_filter_on_the_page_is_ignored_and_said_so(client_as):
    _entries(2)
    response = client_as("manager").get("/audit/", {"host": "no-such-host"})
    assert len(_listed(response)) == 2
    assert 'id="filter-errors"' in response.content.decode()


def test_the_second_page_keeps_the_filter(client_as):
    _entries(PAGE_SIZE + 1, action="runbook.update")
    _entries(3, action="deployment.change")
    client = client_as("manager")
    first = client.get("/audit/", {"action": "runbook"})
    assert len(_listed(first)) == PAGE_SIZE
    link = next_link(first)
    assert "action=runbook" in link and "page=2" in link
    second = client.get(f"/audit/{link}")
    assert len(_listed(second)) == 1
    assert _listed(second)[0].startswith("runbook.update")


def test_the_api_filters_pages_and_answers_400_on_a_bad_value(personas):
    _entries(3, action="runbook.update", host=HostFactory(name="infer-01"))
    _entries(2, action="deployment.change")
    client = token_client(personas["oncall"])
    first = api_page(client, "/api/audit/", {"action": "runbook", "page_size": 2})
    assert first["count"] == 3
    assert first["results"][0]["host"] == "infer-01"
    assert first["results"][0]["object_type"] == "runbooknote"
    assert "action=runbook" in first["next"]
    second = client.get(first["next"]).json()
    assert [entry["action"] for entry in second["results"]] == ["runbook.update"]
    assert client.get("/api/audit/", {"host": "no-such-host"}).status_code == 400


def test_the_host_page_links_to_the_hosts_whole_trail(client_as):
    host = HostFactory(name="infer-01")
    _entries(25, action="deployment.change", host=host)
    client = client_as("oncall")
    page = client.get(f"/hosts/{host.name}/").content.decode()
    assert 'href="/audit/?host=infer-01"' in page
    assert client.get("/audit/", {"host": "infer-01"}).context["page"].paginator.count == 25


def test_the_page_and_api_filter_by_change_id(client_as, personas):
    _entries(3)
    first = AuditEntry.objects.order_by("pk").first()
    listed = _listed(client_as("manager").get("/audit/", {"change": str(first.change_id)}))
    assert listed == [first.object_repr]
    page = api_page(
        token_client(personas["manager"]), "/api/audit/", {"change": str(first.change_id)}
    )
    assert [row["object_repr"] for row in page["results"]] == [first.object_repr]


def test_the_page_does_not_list_every_host_to_filter_by(client_as):
    """A host is typed, not picked from a select of the whole fleet (10,000 options, 500 KB a
    page at 10,000 hosts); the typed name still filters."""
    hosts = [HostFactory(name=f"fleet-{n:03d}") for n in range(30)]
    _entries(1, action="deployment.change", host=hosts[7])
    client = client_as("manager")
    page = client.get("/audit/").content.decode()
    assert "fleet-012" not in page
    assert '<select name="host"' not in page
    filtered = client.get("/audit/", {"host": "fleet-007"})
    assert _listed(filtered) == ["deployment.change 0"]
    assert 'value="fleet-007"' in filtered.content.decode()
