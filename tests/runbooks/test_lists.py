"""The runbook list page and GET /api/runbooks/, with the same filters."""

import pytest

from console.core import pagination
from runbooks.models import RunbookNote
from tests.lists import api_page, next_link, token_client

pytestmark = pytest.mark.django_db


def _listed(response) -> list[str]:
    assert response.status_code == 200
    return [note.slug for note in response.context["page"]]


def _library_tagged(tag: str) -> list[str]:
    return list(
        RunbookNote.objects.filter(tags__contains=[tag])
        .order_by("title")
        .values_list("slug", flat=True)
    )


def test_the_page_filters_by_scope_tag_and_text(client_as):
    client = client_as("manager")
    assert _listed(client.get("/runbooks/", {"tag": "MPS"})) == _library_tagged("mps")
    assert _listed(client.get("/runbooks/", {"scope": "host"})) == []
    assert _listed(client.get("/runbooks/", {"q": "xyzzy-nowhere"})) == []


def test_a_bad_filter_on_the_page_is_ignored_and_said_so(client_as):
    response = client_as("manager").get("/runbooks/", {"scope": "galaxy"})
    assert len(_listed(response)) == RunbookNote.objects.count()
    assert 'id="filter-errors"' in response.content.decode()


def test_the_second_page_keeps_the_filter(client_as, monkeypatch):
    tagged = _library_tagged("mps")
    assert len(tagged) >= 2, "the library tags several notes mps"
    monkeypatch.setattr(pagination, "PAGE_SIZE", len(tagged) - 1)
    client = client_as("oncall")
    first = client.get("/runbooks/", {"tag": "mps"})
    link = next_link(first)
    assert "tag=mps" in link and "page=2" in link
    assert _listed(first) + _listed(client.get(f"/runbooks/{link}")) == tagged


def test_the_api_filters_pages_and_answers_400_on_a_bad_value(personas):
    client = token_client(personas["oncall"])
    tagged = _library_tagged("mps")
    first = api_page(client, "/api/runbooks/", {"tag": "mps", "page_size": 1})
    assert first["count"] == len(tagged)
    note = first["results"][0]
    assert note["slug"] == tagged[0]
    assert note["url"].endswith(f"/runbooks/{tagged[0]}/")
    assert note["body"]
    assert "tag=mps" in first["next"]
    assert client.get(first["next"]).json()["results"][0]["slug"] == tagged[1]
    assert client.get("/api/runbooks/", {"scope": "galaxy"}).status_code == 400
