"""GET /api/host-actions/: who asked what of which host and what came back, with filters."""

import datetime as dt

import pytest
from django.utils import timezone

from console.operations import services
from console.operations.models import HostAction
from tests.factories import DeploymentFactory, GpuFactory
from tests.lists import api_page, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_actions(personas, card):
    gpu, _, cheap = card
    asked = services.do_request_action(
        acting_user=personas["approver"], host=gpu.host, action="restart", deployment=cheap
    )
    other_gpu = GpuFactory(index=0)
    other = DeploymentFactory(host=other_gpu.host, gpus=[other_gpu], runtime_name="elsewhere")
    finished = HostAction.objects.create(
        host=other_gpu.host, deployment=other, action="restart", state=HostAction.State.FAILED,
        origin=HostAction.Origin.DEGRADATION, finished_at=timezone.now(), exit_code=3,
        reason_code="exit_code",
    )  # fmt: skip
    return asked, finished


def test_the_list_is_newest_first_with_who_asked(personas, two_actions):
    asked, finished = two_actions
    results = api_page(token_client(personas["oncall"]), "/api/host-actions/")["results"]
    assert [row["id"] for row in results] == [finished.pk, asked.pk]
    mine = results[1]
    assert mine["requested_by"] == "approver" and mine["approved_by"] is None
    assert mine["state"] == "awaiting_approval" and mine["deployment"] == "batch"
    assert mine["host"] == asked.host.name
    assert results[0]["exit_code"] == 3 and results[0]["origin"] == "degradation"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"state": "failed"}, "finished"),
        ({"origin": "manual"}, "asked"),
        ({"action": "restart", "state": "awaiting_approval"}, "asked"),
    ],
)
def test_the_filters_narrow_the_list(personas, two_actions, params, expected):
    wanted = dict(zip(("asked", "finished"), two_actions, strict=True))[expected]
    results = api_page(token_client(personas["manager"]), "/api/host-actions/", params)["results"]
    assert [row["id"] for row in results] == [wanted.pk]


def test_a_host_filter_names_the_host(personas, two_actions):
    asked, _ = two_actions
    client = token_client(personas["oncall"])
    results = api_page(client, "/api/host-actions/", {"host": asked.host.name})["results"]
    assert [row["id"] for row in results] == [asked.pk]


@pytest.mark.parametrize(
    "params", [{"state": "exploded"}, {"host": "no-such-host"}, {"since": "yesterday"}]
)
def test_a_filter_value_that_does_not_fit_is_a_400(personas, two_actions, params):
    assert token_client(personas["oncall"]).get("/api/host-actions/", params).status_code == 400


def test_a_role_without_the_view_permission_reads_nothing(personas, two_actions):
    assert token_client(personas["outsider"]).get("/api/host-actions/").status_code == 403


@pytest.mark.parametrize(
    ("since", "status"),
    [
        ("2686-10-14T14:10:56+22:40", 400),  # beyond the years any record carries
        ("1970-01-01T00:00:00Z", 400),
        ("2026-12-03T10:00:00+23:59", 200),  # an offset PostgreSQL cannot hold, taken in UTC
    ],
)
def test_a_moment_postgresql_cannot_hold_is_no_server_error(personas, two_actions, since, status):
    # Python parses offsets up to ±23:59, PostgreSQL keeps ±15:59: found by the API fuzz.
    answer = token_client(personas["oncall"]).get("/api/host-actions/", {"since": since})
    assert answer.status_code == status, answer.content


def test_since_compares_in_utc(personas, two_actions):
    asked, finished = two_actions
    later = (finished.created_at + dt.timedelta(hours=1)).astimezone(
        dt.timezone(dt.timedelta(hours=15, minutes=30))
    )
    client = token_client(personas["oncall"])
    assert api_page(client, "/api/host-actions/", {"since": later.isoformat()})["count"] == 0
    earlier = asked.created_at - dt.timedelta(minutes=1)
    assert api_page(client, "/api/host-actions/", {"since": earlier.isoformat()})["count"] == 2
