"""The fleet board: one row per host with the figures on-call scan first."""

import datetime as dt
import re
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.core.pagination import PAGE_SIZE
from inventory.models import CollectorStatus, Event
from tests.batches import GIB, write_history
from tests.factories import DeploymentFactory, GpuFactory, HostFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet():
    busy = GpuFactory(host__name="busy", index=0, memory_total_bytes=80 * GIB)
    calm = GpuFactory(host__name="calm", index=0, memory_total_bytes=80 * GIB)
    start = (timezone.now() - dt.timedelta(minutes=30)).timestamp()
    for gpu, gib in ((busy, 60), (calm, 10)):
        deployment = DeploymentFactory(host=gpu.host, gpus=[gpu])
        write_history(gpu.host, [(gpu, deployment)], start=start, minutes=30,
                      demand=lambda m, i, gib=gib: gib * GIB)  # fmt: skip
    Event.objects.create(host=busy.host, kind=Event.Kind.OOM, at=timezone.now(),
                         batch_id="00000000-0000-4000-8000-0000000000c1", position=0)  # fmt: skip
    return busy.host, calm.host


def test_rows_sort_by_headroom_and_flag_problems(client_as, fleet):
    response = client_as("oncall").get("/", {"sort": "headroom"})
    rows = response.context["rows"]
    assert [row.host.name for row in rows] == ["busy", "calm"]
    assert rows[1].largest_headroom_bytes - rows[0].largest_headroom_bytes == 50 * GIB
    assert rows[0].ooms_24h == 1
    problems = client_as("oncall").get("/", {"problems": "1"}).context["rows"]
    assert {row.host.name for row in problems} >= {"busy"}


def test_the_partial_returns_rows_only_for_the_live_refresh(client_as, fleet):
    response = client_as("manager").get("/", {"partial": "1"})
    html = response.content.decode()
    assert "<tr" in html and "<html" not in html
    assert 'data-host="busy"' in html


def test_a_stale_collector_shows_as_stale(client_as, fleet):
    busy, _ = fleet
    CollectorStatus.objects.filter(host=busy).update(
        last_sample_at=timezone.now() - dt.timedelta(hours=1)
    )
    rows = {row.host.name: row for row in client_as("manager").get("/").context["rows"]}
    assert rows["busy"].collector["stale"]
    assert not rows["calm"].collector["stale"]


def test_the_board_pages_on_the_server_with_problems_first(client_as):
    hosts = [HostFactory(name=f"page-{i:03d}") for i in range(PAGE_SIZE + 5)]
    for host in hosts:
        GpuFactory(host=host, index=0)
        CollectorStatus.objects.create(host=host, last_sample_at=timezone.now(),
                                       last_batch_at=timezone.now())  # fmt: skip
    troubled = hosts[-1]
    Event.objects.create(host=troubled, kind=Event.Kind.OOM, at=timezone.now(), cause="true_peak",
                         batch_id=uuid.uuid4(), position=0)  # fmt: skip
    client = client_as("oncall")
    first = client.get("/?partial=1&sort=name")
    names = re.findall(r'<tr data-host="([^"]+)"', first.content.decode())
    assert len(names) == PAGE_SIZE
    assert names[0] == troubled.name  # a problem outranks the alphabet
    second = client.get("/?partial=1&sort=name&page=2").content.decode()
    assert len(re.findall(r"<tr data-host=", second)) == 5


def _queries(client, url):
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured.captured_queries)


def test_a_refresh_costs_the_same_queries_for_ten_hosts_as_for_one(client_as):
    # One query per figure for the whole fleet; a column the row leaves unread must not
    # come back as a query per host.
    client = client_as("oncall")
    CollectorStatus.objects.create(host=GpuFactory(index=0).host, last_sample_at=timezone.now())
    one = _queries(client, "/?partial=1")
    for _ in range(9):
        CollectorStatus.objects.create(host=GpuFactory(index=0).host,
                                       last_sample_at=timezone.now())  # fmt: skip
    assert _queries(client, "/?partial=1") == one
    assert _queries(client, "/export.csv") == _queries(client, "/export.csv")
