"""The proposal list and the inbox page; GET /api/proposals/ with the list's filters."""

import pytest

from console.core import pagination
from tests.console.proposals.support import create_proposal, ready_proposal
from tests.lists import api_page, next_link, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def one_a_page(monkeypatch):
    monkeypatch.setattr(pagination, "PAGE_SIZE", 1)


def _listed(response) -> set[int]:
    assert response.status_code == 200
    return {proposal.pk for proposal in response.context["page"]}


def test_a_bad_filter_on_the_page_is_ignored_and_said_so(client_as, personas):
    draft = create_proposal(personas["oncall"])
    response = client_as("manager").get("/proposals/", {"state": "dreaming"})
    assert _listed(response) == {draft.pk}
    assert 'id="filter-errors"' in response.content.decode()


def test_the_second_page_keeps_the_filters(client_as, personas, one_a_page):
    drafts = {create_proposal(personas["oncall"]).pk for _ in range(2)}
    ready_proposal(personas["oncall"])
    client = client_as("manager")
    first = client.get("/proposals/", {"state": "draft"})
    link = next_link(first)
    assert "state=draft" in link and "page=2" in link
    second = client.get(f"/proposals/{link}")
    assert _listed(first) | _listed(second) == drafts


def test_the_inbox_pages_too(client_as, personas, one_a_page):
    waiting = {ready_proposal(personas["oncall"]).pk for _ in range(2)}
    client = client_as("approver")
    first = client.get("/proposals/inbox/")
    second = client.get(f"/proposals/inbox/{next_link(first)}")
    assert _listed(first) | _listed(second) == waiting


def test_the_api_filters_pages_and_answers_400_on_a_bad_value(personas):
    drafts = [create_proposal(personas["oncall"]) for _ in range(2)]
    ready = ready_proposal(personas["approver"])
    client = token_client(personas["manager"])
    answer = api_page(client, "/api/proposals/", {"state": "ready_for_approval"})
    assert [proposal["id"] for proposal in answer["results"]] == [ready.pk]
    assert api_page(client, "/api/proposals/", {"author": "approver"})["count"] == 1
    first = api_page(client, "/api/proposals/", {"state": "draft", "page_size": 1})
    assert first["count"] == 2 and "state=draft" in first["next"]
    second = client.get(first["next"]).json()
    listed = {first["results"][0]["id"], second["results"][0]["id"]}
    assert listed == {draft.pk for draft in drafts}
    assert client.get("/api/proposals/", {"state": "dreaming"}).status_code == 400
    assert client.get("/api/proposals/", {"host": "no-such-host"}).status_code == 400
