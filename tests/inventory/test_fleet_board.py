"""The fleet board: one row per host with the figures on-call scan first."""

import datetime as dt
import itertools
import re
import uuid
from dataclasses import astuple, fields
from types import SimpleNamespace

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from console.checks import host_summaries_outlast_their_interval
from console.core.pagination import PAGE_SIZE
from inventory.models import CollectorStatus, Event, Host, HostSummary, HostSummaryRun
from inventory.reports import board
from inventory.reports.fleet import SORTS, HostFigures, fleet_rows, host_figures, sorted_rows
from inventory.tasks import refresh_host_summaries
from inventory.timeseries import host_summary, partitions
from tests.batches import GIB, write_history
from tests.examples import examples
from tests.factories import DeploymentFactory, GpuFactory, HostFactory, ServedModelFactory

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


# The board over its summary table (inventory.reports.board): the same rows, in the same
# order, as computed live, whenever every host's summary is fresh; computed live otherwise.

NOW = dt.datetime.now(dt.UTC).replace(minute=30, second=0, microsecond=0) - dt.timedelta(hours=1)
HOUR = NOW.replace(minute=0)
# Names the C collation and a language's collation order differently (dots, dashes, case).
NAMES = ("a-2", "a1", "A1", "b_c", "b.c", "bc", "z9", "a")
STALE_S = 120.0
STALE_SUMMARY_S = 600.0  # NOW is half past: a summary that much older is still of its hour
# Collector ages (s) about the stale limit; None: no sample; "none": no status row at all.
_AGES = st.sampled_from(
    (None, "none", 0.0, 1.5, STALE_S - 1e-6, STALE_S, STALE_S + 1e-6, 3600.0, -5.0)
)
# OOM times relative to NOW (s): inside the 24 h window, on its edges, outside it.
_OOMS = st.lists(st.sampled_from((0.0, 60.0, 86400.0, 86400.000001, -1.0)), max_size=3)
_FRAG = st.one_of(st.none(), st.floats(0, 1, width=32), st.sampled_from((0.3, 0.5, 0.0)))
_USED = st.one_of(st.none(), st.integers(0, 90 * GIB))
# A card: its total and, per hourly bucket (two hours ago: outside the window; the last hour;
# this hour), its peak used and fragmentation, or no rollup.
_card = st.tuples(
    st.sampled_from((80 * GIB, 141 * GIB)),
    st.lists(st.one_of(st.none(), st.tuples(_USED, _FRAG)), min_size=3, max_size=3),
)
# A deployment: its model's SLO (ms, or none), stopped or not, P99 (s) per bucket.
_deployment = st.tuples(
    st.sampled_from((None, 500, 800)),
    st.booleans(),
    st.lists(st.one_of(st.none(), st.floats(0.125, 2.0, width=32)), min_size=3, max_size=3),
)
_host = st.fixed_dictionaries(
    {
        "status": st.sampled_from(("active", "maintenance")),
        "age": _AGES,
        "ooms": _OOMS,
        "cards": st.lists(_card, max_size=3),
        "deployments": st.lists(_deployment, max_size=2),
    }
)
_fleet = st.lists(_host, min_size=1, max_size=len(NAMES)).map(
    lambda hosts: dict(zip(NAMES, hosts, strict=False))
)


def _rollup(sql: str, params: list) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _build(fleet: dict) -> None:
    buckets = [HOUR - dt.timedelta(hours=2), HOUR - dt.timedelta(hours=1), HOUR]
    for n, (name, spec) in enumerate(fleet.items()):
        host = HostFactory(name=name, status=spec["status"])
        if spec["age"] != "none":
            last = None if spec["age"] is None else NOW - dt.timedelta(seconds=spec["age"])
            CollectorStatus.objects.create(host=host, last_sample_at=last)
        for i, offset in enumerate(spec["ooms"]):
            Event.objects.create(host=host, kind=Event.Kind.OOM, position=i,
                                 at=NOW - dt.timedelta(seconds=offset),
                                 batch_id=uuid.UUID(int=n * 16 + i))  # fmt: skip
        for index, (total, hours) in enumerate(spec["cards"]):
            gpu = GpuFactory(host=host, index=index, memory_total_bytes=total)
            for bucket, hour in zip(buckets, hours, strict=True):
                if hour is not None:
                    _rollup(
                        "INSERT INTO inventory_card_rollup_1h (gpu_id, bucket, samples, "
                        "total_bytes, used_max, reserved_max, frag_index_max) "
                        "VALUES (%s, %s, 360, %s, %s, %s, %s)",
                        [gpu.pk, bucket, total, hour[0], 479 * 1024**2, hour[1]],
                    )
        for slo, stopped, p99s in spec["deployments"]:
            model = ServedModelFactory(name=f"model-{slo}", p99_latency_slo_ms=slo)
            deployment = DeploymentFactory(host=host, served_model=model,
                                           status="stopped" if stopped else "running")  # fmt: skip
            for bucket, p99 in zip(buckets, p99s, strict=True):
                _rollup(
                    "INSERT INTO inventory_engine_rollup_1h (deployment_id, bucket, samples, "
                    "latency_p99_max) VALUES (%s, %s, 60, %s)",
                    [deployment.pk, bucket, p99],
                )


def _hosts():
    return Host.objects.select_related("collector_status")


@pytest.fixture
def summaries(settings):
    settings.COLLECTOR_STALE_AFTER_S = STALE_S
    settings.HOST_SUMMARY_STALE_AFTER_S = STALE_SUMMARY_S
    partitions.ensure_partitions(HOUR - dt.timedelta(hours=3), NOW)


# What becomes of a host's summary after the job has run: kept, deleted, or (where the run is
# not fresh, so it must not be read) made up; and of the run: fresh; older but within the
# limit; older than the limit; stamped in the next hour.
_HOST_AFTER = st.sampled_from(("kept", "missing", "made up"))
_RUN_AFTER = st.sampled_from(("fresh", "older", "stale", "next hour"))
RUN_AT = {
    "fresh": NOW,
    "older": NOW - dt.timedelta(seconds=STALE_SUMMARY_S - 1),
    "stale": NOW - dt.timedelta(seconds=STALE_SUMMARY_S + 1),
    "next hour": HOUR + dt.timedelta(hours=1),
}


@hypothesis_settings(
    max_examples=examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    fleet=_fleet,
    chosen=st.sets(st.sampled_from(NAMES)),
    after=st.lists(_HOST_AFTER, min_size=len(NAMES), max_size=len(NAMES)),
    run=_RUN_AFTER,
)
def test_the_summary_is_the_live_figures_and_orders_the_board_as_before(
    summaries, fleet, chosen, after, run
):
    # The examples share one test's database: each one's rows go with its savepoint.
    with transaction.atomic():
        _check_against_live(fleet, chosen, dict(zip(NAMES, after, strict=True)), run)
        transaction.set_rollback(True)


@hypothesis_settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(fleet=_fleet, before_the_turn_s=st.sampled_from((1.0, 20.0, STALE_SUMMARY_S - 10)))
def test_late_in_an_hour_the_next_hours_set_is_written_and_read_at_the_turn(
    summaries, fleet, before_the_turn_s
):
    turn = HOUR + dt.timedelta(hours=1)
    late = turn - dt.timedelta(seconds=before_the_turn_s)
    after_the_turn = turn + dt.timedelta(seconds=5)
    with transaction.atomic():
        _build(fleet)
        assert board.refresh_summaries(late) == 2 * len(fleet)
        assert set(HostSummaryRun.objects.values_list("hour", flat=True)) == {HOUR, turn}
        # Before the turn the board reads this hour's set, after it the next one's: each the
        # live figures of its moment (the next hour's window has dropped the hour before).
        stale = late + dt.timedelta(seconds=STALE_SUMMARY_S + 1)  # the job stopped
        for now, computed_live in ((late, 0), (after_the_turn, 0), (stale, len(fleet))):
            for sort in ("name", "headroom", "fragmentation", "p99"):
                kind = {"problems_only": False, "problems_first": True, "now": now}
                summarised = board.board(_hosts(), sort, **kind)
                assert summarised.computed_live == computed_live, now
                assert list(summarised.rows) == _as_before(_hosts(), sort, **kind)[0], now
        # The run after the turn writes that hour's set again and drops the one before.
        board.refresh_summaries(after_the_turn)
        assert set(HostSummaryRun.objects.values_list("hour", flat=True)) == {turn}
        assert set(HostSummary.objects.values_list("hour", flat=True)) == {turn}
        transaction.set_rollback(True)


def test_early_in_an_hour_no_next_set_is_written_and_the_turn_is_computed_live(summaries):
    _build({"a": {"status": "active", "age": 0.0, "ooms": [],
                  "cards": [(80 * GIB, [None, (40 * GIB, 0.5), (10 * GIB, 0.2)])],
                  "deployments": []}})  # fmt: skip
    assert board.refresh_summaries(NOW) == 1
    assert list(HostSummaryRun.objects.values_list("hour", flat=True)) == [HOUR]
    turn = HOUR + dt.timedelta(hours=1, seconds=5)
    assert board.board(_hosts(), "name", problems_only=False, now=turn).computed_live == 1
    # This hour's set holds the hour before's 40 GiB peak; at the turn only this hour's counts.
    [row] = board.board(_hosts(), "name", problems_only=False, now=turn).rows[0:1]
    assert row.largest_headroom_bytes == 70 * GIB - 479 * 1024**2


def _as_before(hosts, sort, *, problems_only, problems_first, now):
    """The board as its view computed it before the summary table: every row live."""
    rows = fleet_rows(list(hosts), now)
    if problems_only:
        rows = [row for row in rows if row.problems]
    ordered = sorted_rows(rows, sort)
    if problems_first:
        ordered = sorted(ordered, key=lambda row: not row.problems)
    return ordered, sum(row.problems for row in rows)


def _check_against_live(fleet: dict, chosen: set, after: dict, run: str) -> None:
    _build(fleet)
    ids = list(_hosts().values_list("pk", flat=True))
    assert board.refresh_summaries(NOW) == len(ids)
    assert board.refresh_summaries(NOW) == 0  # nothing changed: no row written again
    stored = {
        s.host_id: tuple(getattr(s, name) for name in host_summary.COLUMNS)
        for s in HostSummary.objects.all()
    }
    live = host_figures(ids, NOW)
    assert stored == {host_id: astuple(figures) for host_id, figures in live.items()}
    # What a late, failed or not yet run job leaves: each host without a summary of a fresh
    # run must be computed live.
    HostSummaryRun.objects.update(computed_at=RUN_AT[run])
    run_fresh = run in ("fresh", "older")
    for host in _hosts():
        summary = HostSummary.objects.filter(host=host)
        if after[host.name] == "missing":
            summary.delete()
        elif after[host.name] == "made up" and not run_fresh:
            summary.update(largest_headroom_bytes=999 * GIB, fragmentation_status="red")
    # Every filter the board has narrows the queryset: a status, a set of names, none.
    for hosts in (
        _hosts(),
        _hosts().filter(status="maintenance"),
        _hosts().filter(name__in=chosen),
    ):
        spoiled = sum(not run_fresh or after[host.name] == "missing" for host in hosts)
        for sort, problems_only, problems_first in itertools.product(
            SORTS, (False, True), (True, False)
        ):
            kind = {"problems_only": problems_only, "problems_first": problems_first, "now": NOW}
            summarised = board.board(hosts, sort, **kind)
            assert summarised.computed_live == spoiled
            rows, problems = _as_before(hosts, sort, **kind)
            assert list(summarised.rows) == rows, (sort, problems_only, problems_first)
            assert len(summarised.rows) == len(rows)
            assert summarised.problem_hosts == problems
            # A page is a slice: the rows from the second on, two at a time.
            assert summarised.rows[1:3] == rows[1:3]


def test_the_sorts_in_sql_are_the_sorts_of_the_board():
    assert set(host_summary.SORTS) == set(SORTS)
    assert tuple(field.name for field in fields(HostFigures)) == host_summary.COLUMNS


def _made_up(host):
    HostSummary.objects.filter(host=host).update(
        largest_headroom_bytes=1234 * GIB, headroom_card="card 7", p99_detail="made up"
    )


def _run_at(at):
    HostSummaryRun.objects.update(computed_at=at)


def _board_rows(client, **params):
    """The rows as shown, the collector's age left out (it grows between two requests)."""
    return {
        row.host.name: (
            *(getattr(row, field.name) for field in fields(HostFigures)),
            row.ooms_24h,
            row.collector["stale"],
            row.problems,
        )
        for row in client.get("/", params).context["rows"]
    }


def test_the_board_reads_fresh_summaries_and_computes_missing_or_stale_ones_live(
    client_as, fleet, settings
):
    busy, calm = fleet
    client = client_as("oncall")
    live = _board_rows(client)
    board.refresh_summaries()
    assert _board_rows(client) == live  # fresh: the same rows, now from the table
    # A summary that says something else (made up here) shows while its run is fresh...
    _made_up(calm)
    _made_up(busy)
    assert _board_rows(client)["calm"][1] == 1234 * GIB
    # ... not for a host without one (computed for the request) ...
    HostSummary.objects.filter(host=busy).delete()
    rows = _board_rows(client)
    assert rows["busy"] == live["busy"]
    assert rows["calm"][1] == 1234 * GIB
    assert board.board(_hosts(), "name", problems_only=False).computed_live == 1
    # ... and for none once the run is older than the limit, or of another hour's set.
    settings.HOST_SUMMARY_STALE_AFTER_S = 3600
    _run_at(timezone.now() - dt.timedelta(seconds=3601))
    assert _board_rows(client) == live
    _run_at(timezone.now())
    for model in (HostSummary, HostSummaryRun):
        model.objects.update(hour=F("hour") - dt.timedelta(hours=2))
    assert _board_rows(client) == live
    # A filter is no different: the host it keeps is computed live while no set is fresh...
    assert _board_rows(client, q="calm") == {"calm": live["calm"]}
    for model in (HostSummary, HostSummaryRun):  # ... and read from the table again once it is
        model.objects.update(hour=F("hour") + dt.timedelta(hours=2))
    assert _board_rows(client, q="calm")["calm"][1] == 1234 * GIB


def test_an_agent_that_stops_reporting_is_stale_on_a_summarised_board(client_as, fleet, settings):
    busy, calm = fleet
    settings.FRAGMENTATION_AMBER, settings.FRAGMENTATION_RED = 0.8, 0.9  # the fleet's 0.5: green
    CollectorStatus.objects.update(last_sample_at=timezone.now())
    Event.objects.filter(host=busy).delete()
    board.refresh_summaries()
    client = client_as("oncall")
    assert not any(problems for *_, problems in _board_rows(client).values()), _board_rows(client)
    CollectorStatus.objects.filter(host=calm).update(
        last_sample_at=timezone.now() - dt.timedelta(hours=1)
    )
    rows = client.get("/", {"sort": "name", "partial": "1"})
    assert board.board(_hosts(), "name", problems_only=False).computed_live == 0
    names = re.findall(r'<tr data-host="([^"]+)"', rows.content.decode())
    assert names == ["calm", "busy"]  # the stale one is a problem: first
    assert "stale" in rows.content.decode()
    assert [row.host.name for row in client.get("/", {"problems": "1"}).context["rows"]] == ["calm"]


def test_the_summarised_board_pages_on_the_server_with_problems_first(client_as):
    hosts = [HostFactory(name=f"page-{i:03d}") for i in range(PAGE_SIZE + 5)]
    for host in hosts:
        GpuFactory(host=host, index=0)
        CollectorStatus.objects.create(host=host, last_sample_at=timezone.now(),
                                       last_batch_at=timezone.now())  # fmt: skip
    troubled = hosts[-1]
    Event.objects.create(host=troubled, kind=Event.Kind.OOM, at=timezone.now(), cause="true_peak",
                         batch_id=uuid.uuid4(), position=0)  # fmt: skip
    board.refresh_summaries()
    client = client_as("oncall")
    first = client.get("/?sort=name")
    assert board.board(_hosts(), "name", problems_only=False).computed_live == 0
    assert first.context["problem_hosts"] == 1
    names = [row.host.name for row in first.context["rows"]]
    assert len(names) == PAGE_SIZE
    assert names[0] == troubled.name  # a problem outranks the alphabet
    assert names[1:] == [host.name for host in hosts[: PAGE_SIZE - 1]]
    second = client.get("/?partial=1&sort=name&page=2").content.decode()
    assert len(re.findall(r"<tr data-host=", second)) == 5
    past = client.get("/?sort=name&page=99")  # a page past the end shows the last
    assert len(past.context["rows"]) == 5


def test_a_summarised_refresh_costs_the_same_queries_for_ten_hosts_as_for_one(client_as):
    client = client_as("oncall")
    CollectorStatus.objects.create(host=GpuFactory(index=0).host, last_sample_at=timezone.now())
    board.refresh_summaries()
    one = _queries(client, "/?partial=1")
    for _ in range(9):
        CollectorStatus.objects.create(host=GpuFactory(index=0).host,
                                       last_sample_at=timezone.now())  # fmt: skip
    board.refresh_summaries()
    assert _queries(client, "/?partial=1") == one


def test_the_export_is_the_same_from_the_summary(client_as, fleet):
    client = client_as("manager")
    live = b"".join(client.get("/export.csv?sort=headroom").streaming_content)
    board.refresh_summaries()
    assert board.board(_hosts(), "headroom", problems_only=False).computed_live == 0
    assert b"".join(client.get("/export.csv?sort=headroom").streaming_content) == live


def test_the_job_writes_what_changed_keeps_the_newest_run_and_runs_on_beat(
    fleet, settings, monkeypatch
):
    busy, _ = fleet
    # A clock in the middle of an hour, a second a reading: one set whatever the hour.
    clock = (NOW + dt.timedelta(seconds=s) for s in itertools.count())
    monkeypatch.setattr(board, "timezone", SimpleNamespace(now=lambda: next(clock)))
    assert refresh_host_summaries() == 2
    newest = HostSummaryRun.objects.get().computed_at
    assert board.refresh_summaries() == 0  # nothing changed: nothing written, the run stamped
    assert HostSummaryRun.objects.get().computed_at > newest
    newest = HostSummaryRun.objects.get().computed_at
    # A run that started earlier and ends later leaves the newer one as it is.
    HostSummary.objects.filter(host=busy).update(cards=7)
    assert board.refresh_summaries(newest - dt.timedelta(seconds=5)) == 0
    assert HostSummaryRun.objects.get().computed_at == newest
    assert HostSummary.objects.get(host=busy).cards == 7
    assert board.refresh_summaries() == 1  # the next one puts it right
    assert HostSummary.objects.get(host=busy).cards == 1
    entry = settings.CELERY_BEAT_SCHEDULE["refresh-host-summaries"]
    assert entry["task"] == refresh_host_summaries.name
    assert entry["options"]["expires"] == entry["schedule"]
    # And at the top of each hour, when the last run's window stops being the board's.
    hourly = settings.CELERY_BEAT_SCHEDULE["refresh-host-summaries-on-the-hour"]
    assert hourly["task"] == refresh_host_summaries.name
    assert hourly["schedule"].minute == {0} and len(hourly["schedule"].hour) == 24


def test_a_board_with_nothing_visible_is_empty_not_an_error(fleet):
    board.refresh_summaries()
    empty = board.board(Host.objects.none(), "name", problems_only=False)
    assert list(empty.rows) == [] and empty.problem_hosts == 0
    # An unknown sort (the form refuses one; a caller might not) is by name, as sorted_rows.
    kind = {"problems_only": False, "problems_first": False, "now": timezone.now()}
    named, unknown = board.board(_hosts(), "name", **kind), board.board(_hosts(), "colour", **kind)
    assert list(unknown.rows) and list(unknown.rows) == list(named.rows)


def test_a_stale_limit_within_the_interval_is_warned_of(settings):
    assert host_summaries_outlast_their_interval(None) == []
    settings.HOST_SUMMARY_STALE_AFTER_S = settings.HOST_SUMMARY_INTERVAL_S
    (warning,) = host_summaries_outlast_their_interval(None)
    assert warning.id == "console.W001"
