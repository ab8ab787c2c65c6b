"""The OOM history: weekly counts, filters, change markers, before/after, CSV export."""

import csv
import datetime as dt
import io
import uuid

import pytest
from django.utils import timezone

from console.core.auditing.changes import open_change, record
from inventory.models import Event, IngestedBatch
from inventory.reports import oom_history
from inventory.reports.oom_history import BeforeAfter, Selection, comparison_span
from tests.factories import DeploymentFactory, GpuFactory, HostFactory, ServedModelFactory

DAY = dt.timedelta(days=1)
WEEK = dt.timedelta(weeks=1)


def this_monday() -> dt.datetime:
    """Monday 00:00 UTC of the current ISO week: events are placed in whole past weeks."""
    today = timezone.now().astimezone(dt.UTC).date()
    return dt.datetime.combine(today - dt.timedelta(days=today.weekday()), dt.time(), dt.UTC)


def oom(host, at, cause="true_peak", deployment=None, gpu=None, explanation="", kind="oom"):
    return Event.objects.create(
        host=host,
        gpu=gpu,
        deployment=deployment,
        kind=kind,
        at=at,
        cause=cause,
        cause_explanation=explanation,
        batch_id=uuid.uuid4(),
        position=0,
    )


def collected(host, start, end):
    """The host's telemetry covers start..end (what bounds a before/after comparison)."""
    IngestedBatch.objects.create(
        batch_id=uuid.uuid4(),
        host=host,
        sampler_id=uuid.uuid4(),
        seq=1,
        interval_start=start,
        interval_end=end,
    )


def audited(deployment, at, *, action="deployment.change", actor=None, comment=""):
    """A placement change at `at`; inside an open change, one more row of that change."""
    with open_change(actor, at=at):
        return record(
            actor=actor,
            action=action,
            obj=deployment,
            before={"isolation_mode": "time_slicing"},
            after={"isolation_mode": "gpu_group"},
            host=deployment.host,
            comment=comment,
        )


def series(breakdown, label):
    return next(one for one in breakdown if one.label == label)


@pytest.fixture
def fleet(db):
    """Two hosts, each with one deployment; week offsets count back from this Monday."""
    infer = HostFactory(name="infer-01")
    edge = HostFactory(name="edge-02")
    llama = DeploymentFactory(host=infer, served_model=ServedModelFactory(name="llama-8b"))
    qwen = DeploymentFactory(host=edge, served_model=ServedModelFactory(name="qwen-7b"))
    return {"infer": infer, "edge": edge, "llama": llama, "qwen": qwen}


def selection(weeks=12, **narrowing) -> Selection:
    start, end = oom_history.window(weeks, timezone.now())
    return Selection(start=start, end=end, **narrowing)


def test_the_window_is_whole_iso_weeks_from_a_monday():
    wednesday = dt.datetime(2025, 3, 12, 15, 30, tzinfo=dt.UTC)
    start, end = oom_history.window(4, wednesday)
    assert start == dt.datetime(2025, 2, 17, tzinfo=dt.UTC)  # a Monday, three weeks earlier
    assert end == wednesday
    weeks = Selection(start=start, end=end).weeks
    assert weeks == [dt.date(2025, 2, 17), dt.date(2025, 2, 24), dt.date(2025, 3, 3),
                     dt.date(2025, 3, 10)]  # fmt: skip


@pytest.mark.django_db
def test_ooms_are_counted_in_their_utc_iso_week_by_cause_host_and_model(fleet):
    monday = this_monday()
    week_1, week_2 = monday - WEEK, monday - 2 * WEEK
    infer, edge = fleet["infer"], fleet["edge"]
    oom(infer, week_2 + DAY, "true_peak", fleet["llama"])
    oom(infer, week_1 - dt.timedelta(seconds=1), "true_peak", fleet["llama"])  # Sunday 23:59:59
    oom(infer, week_1, "fragmentation", fleet["llama"])  # Monday 00:00: the next week
    oom(edge, week_1 + 2 * DAY, "allocator_reserve", fleet["qwen"])
    oom(edge, week_1 + 3 * DAY, "insufficient_data")  # no deployment recorded
    oom(edge, week_1 + 3 * DAY, "", kind=Event.Kind.XID)  # not an OOM
    oom(infer, monday - 13 * WEEK, "true_peak", fleet["llama"])  # before the window

    chosen = selection()
    history = oom_history.weekly_history(
        oom_history.oom_events(Event.objects.all(), chosen), chosen.weeks
    )

    assert len(history.weeks) == 12
    assert history.weeks[-2:] == [week_1.date(), monday.date()]
    assert history.total == 5
    zeros = (0,) * 9
    assert [(one.key, one.counts[-3:]) for one in history.by_cause] == [
        ("true_peak", (2, 0, 0)),
        ("allocator_reserve", (0, 1, 0)),
        ("fragmentation", (0, 1, 0)),
        ("insufficient_data", (0, 1, 0)),
    ]
    assert all(one.counts[:9] == zeros for one in history.by_cause)
    assert [(one.label, one.counts[-3:]) for one in history.by_host] == [
        ("infer-01", (2, 1, 0)),
        ("edge-02", (0, 2, 0)),
    ]
    assert [(one.label, one.total) for one in history.by_model] == [
        ("llama-8b", 3),
        ("No deployment recorded", 1),
        ("qwen-7b", 1),
    ]


@pytest.mark.django_db
def test_a_shorter_window_leaves_older_weeks_out(fleet):
    monday = this_monday()
    oom(fleet["infer"], monday - 5 * WEEK + DAY)
    oom(fleet["infer"], monday - WEEK + DAY)
    chosen = selection(weeks=4)
    history = oom_history.weekly_history(
        oom_history.oom_events(Event.objects.all(), chosen), chosen.weeks
    )
    assert len(history.weeks) == 4
    assert series(history.by_host, "infer-01").counts == (0, 0, 1, 0)


@pytest.mark.django_db
def test_filters_narrow_by_host_model_cause_and_window(client_as, fleet):
    monday = this_monday()
    oom(fleet["infer"], monday - 2 * WEEK, "true_peak", fleet["llama"])
    oom(fleet["infer"], monday - WEEK, "fragmentation", fleet["llama"])
    oom(fleet["edge"], monday - WEEK, "fragmentation", fleet["qwen"])
    oom(fleet["edge"], monday - 20 * WEEK, "fragmentation", fleet["qwen"])
    client = client_as("manager")

    def total(query):
        response = client.get(f"/oom/?{query}")
        assert response.status_code == 200
        return response.context["history"].total

    assert total("") == 3
    assert total("host=edge-02") == 1
    assert total("model=llama-8b") == 2
    assert total("cause=fragmentation") == 2
    assert total("host=infer-01&cause=fragmentation") == 1
    assert total("weeks=26") == 4
    assert total("weeks=26&host=edge-02&model=qwen-7b") == 2


@pytest.mark.django_db
def test_an_unknown_filter_value_is_ignored_and_said_so(client_as, fleet):
    oom(fleet["infer"], this_monday() - WEEK)
    response = client_as("manager").get("/oom/?host=no-such-host&weeks=3")
    assert response.context["history"].total == 1
    assert len(response.context["history"].weeks) == 12
    errors = response.content.decode()
    assert 'id="filter-errors"' in errors
    assert "host (" in errors and "window (" in errors


@pytest.mark.django_db
def test_the_page_embeds_chart_data_and_every_table(client_as, fleet):
    oom(fleet["infer"], this_monday() - WEEK, "fragmentation", fleet["llama"])
    response = client_as("manager").get("/oom/")
    page = response.content.decode()
    assert 'id="chart-by-cause"' in page and 'id="chart-by-host"' in page
    assert 'id="oom-history-data"' in page
    assert "vendor/plotly/plotly.min.js" in page and "js/oom_history.js" in page
    data = response.context["chart_data"]
    assert data["total"] == 1
    assert [(cause["key"], cause["counts"][-2]) for cause in data["causes"]] == [
        ("fragmentation", 1)
    ]
    assert [host["name"] for host in data["hosts"]] == ["infer-01"]
    for table in ("weekly-by-cause", "weekly-by-host", "weekly-by-model"):
        assert f'id="{table}"' in page


@pytest.mark.django_db
def test_the_trend_sums_hosts_beyond_the_busiest_into_one_line(client_as):
    week = this_monday() - WEEK
    hosts = [HostFactory(name=f"node-{index:02d}") for index in range(10)]
    for index, host in enumerate(hosts):
        for _ in range(index + 1):
            oom(host, week)
    trend = client_as("manager").get("/oom/").context["chart_data"]["hosts"]
    assert [line["name"] for line in trend][:2] == ["node-09", "node-08"]
    assert trend[-1]["name"] == "2 other hosts"
    assert trend[-1]["counts"][-2] == 1 + 2  # node-00 and node-01


@pytest.mark.django_db
def test_the_host_table_lists_the_busiest_and_sums_the_others(client_as, monkeypatch):
    monkeypatch.setattr("inventory.views.oom.TABLE_ROWS", 3)
    weeks = (this_monday() - 2 * WEEK, this_monday() - WEEK)
    for index in range(5):
        host = HostFactory(name=f"node-{index:02d}")
        for _ in range(index + 1):
            oom(host, weeks[0])
        oom(host, weeks[1])
    response = client_as("manager").get("/oom/")
    tables = {table_id: rows for _, table_id, rows in response.context["tables"]}
    by_host = tables["weekly-by-host"]
    assert [(one.label, one.counts[-3:-1]) for one in by_host] == [
        ("node-04", (5, 1)),
        ("node-03", (4, 1)),
        ("node-02", (3, 1)),
        ("2 other hosts", (1 + 2, 2)),
    ]
    by_cause = tables["weekly-by-cause"]
    assert sum(one.total for one in by_host) == sum(one.total for one in by_cause) == 20
    assert "The 3 with the most OOMs" in response.content.decode()


@pytest.mark.django_db
def test_an_empty_window_says_so_instead_of_drawing_an_empty_chart(client_as, fleet):
    page = client_as("manager").get("/oom/").content.decode()
    assert "No OOMs in this window." in page
    assert 'id="chart-by-cause"' not in page
    assert 'id="chart-by-host"' not in page


@pytest.mark.django_db
def test_markers_come_from_placement_changes_in_the_audit_trail(client_as, personas, fleet):
    monday = this_monday()
    switch = monday - 3 * WEEK + 2 * DAY
    alice = personas["approver"]
    second = DeploymentFactory(host=fleet["infer"], served_model=ServedModelFactory(name="m2"))
    with open_change(alice, at=switch):  # one apply writes a row per deployment: one change
        audited(fleet["llama"], switch, actor=alice, comment="isolated to its own GPU group")
        audited(second, switch, action="deployment.create")
    audited(fleet["qwen"], monday - WEEK, action="proposal.apply")
    audited(fleet["llama"], monday - 2 * WEEK, action="runbook.update")  # not a placement change
    audited(fleet["llama"], monday - 20 * WEEK)  # before the window
    oom(fleet["infer"], switch - DAY)

    changes = client_as("manager").get("/oom/").context["chart_data"]["changes"]
    assert [(change["host"], change["at"]) for change in changes] == [
        ("edge-02", (monday - WEEK).isoformat()),
        ("infer-01", switch.isoformat()),
    ]
    grouped = changes[1]
    assert grouped["who"] == "approver, system"
    assert grouped["what"] == [
        "deployment.change llama-8b on infer-01 (isolation_mode): isolated to its own GPU group",
        "deployment.create m2 on infer-01 (isolation_mode)",
    ]

    on_infer = client_as("manager").get("/oom/?host=infer-01").context["chart_data"]["changes"]
    assert [change["host"] for change in on_infer] == ["infer-01"]


@pytest.mark.django_db
def test_two_changes_moments_apart_are_two_markers(client_as, fleet):
    switch = this_monday() - 2 * WEEK
    audited(fleet["llama"], switch, comment="first")
    audited(fleet["llama"], switch + dt.timedelta(seconds=30), comment="second")

    changes = client_as("manager").get("/oom/").context["chart_data"]["changes"]
    assert [change["what"][0].rpartition(": ")[2] for change in changes] == ["second", "first"]


@pytest.mark.django_db
def test_ooms_before_a_switch_and_none_after_compare_per_day(client_as, fleet):
    now = timezone.now()
    infer = fleet["infer"]
    collected(infer, now - 10 * DAY, now)
    switch = now - 4 * DAY  # N = min(7, 6 days collected before, 4 days after) = 4
    audited(fleet["llama"], switch)
    for hours in (1, 5, 20, 30, 60, 95):  # six in the 4 days before
        oom(infer, switch - dt.timedelta(hours=hours), "true_peak", fleet["llama"])
    oom(infer, switch - 4 * DAY - dt.timedelta(hours=1), "true_peak", fleet["llama"])  # older
    oom(fleet["edge"], switch + DAY, "true_peak", fleet["qwen"])  # another host

    response = client_as("manager").get("/oom/")
    [(change, comparison)] = response.context["changes"]
    assert change.host == infer
    assert comparison == BeforeAfter(span=4 * DAY, before=6, after=0)
    assert comparison.before_per_day == 1.5
    assert comparison.after_per_day == 0
    row = response.content.decode().split('id="changes-table"')[1]
    assert "(1.50/day)" in row and "(0.00/day)" in row


@pytest.mark.django_db
def test_the_comparison_follows_the_cause_filter(client_as, fleet):
    now = timezone.now()
    collected(fleet["infer"], now - 30 * DAY, now)
    switch = now - 10 * DAY
    audited(fleet["llama"], switch)
    oom(fleet["infer"], switch - DAY, "true_peak")
    oom(fleet["infer"], switch - DAY, "fragmentation")
    oom(fleet["infer"], switch + DAY, "fragmentation")
    response = client_as("manager").get("/oom/?cause=fragmentation")
    [(_, comparison)] = response.context["changes"]
    assert comparison == BeforeAfter(span=7 * DAY, before=1, after=1)


@pytest.mark.django_db
def test_a_change_without_a_day_of_telemetry_after_it_is_not_compared(client_as, fleet):
    now = timezone.now()
    collected(fleet["infer"], now - 10 * DAY, now)
    audited(fleet["llama"], now - dt.timedelta(hours=6))
    response = client_as("manager").get("/oom/")
    [(_, comparison)] = response.context["changes"]
    assert comparison is None
    assert "no comparison yet" in response.content.decode()


CHANGE = dt.datetime(2025, 3, 12, 12, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("covered_from", "covered_until", "span"),
    [
        (CHANGE - 30 * DAY, CHANGE + 30 * DAY, 7 * DAY),  # at most a week
        (CHANGE - 2 * DAY, CHANGE + 30 * DAY, 2 * DAY),  # telemetry started two days before
        (CHANGE - 30 * DAY, CHANGE + 3 * DAY, 3 * DAY),  # the host stopped reporting
        (CHANGE - 30 * DAY, CHANGE + dt.timedelta(hours=23), None),  # under a day after
        (None, None, None),  # never collected
    ],
)
def test_the_comparison_span_is_the_shorter_covered_side_capped_at_a_week(
    covered_from, covered_until, span
):
    assert comparison_span(CHANGE, covered_from, covered_until) == span


@pytest.mark.django_db
def test_the_csv_export_lists_the_filtered_ooms_with_proper_quoting(client_as, fleet):
    monday = this_monday()
    gpu = GpuFactory(host=fleet["infer"], index=3)
    tricky = 'free 1.2 GiB, largest block 0.3 GiB: "fragmentation"\nsecond line'
    first = monday - 2 * WEEK + dt.timedelta(hours=5, microseconds=250_000)
    oom(fleet["infer"], first, "fragmentation", fleet["llama"], gpu, tricky)
    oom(fleet["infer"], monday - WEEK, "insufficient_data", explanation="no allocator stats")
    oom(fleet["edge"], monday - WEEK, "true_peak", fleet["qwen"])  # another host

    response = client_as("manager").get("/oom/export.csv?host=infer-01")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    today = timezone.now().astimezone(dt.UTC).date().isoformat()
    assert response["Content-Disposition"] == (f'attachment; filename="oom-history-{today}.csv"')
    text = b"".join(response.streaming_content).decode()
    assert '"free 1.2 GiB, largest block 0.3 GiB: ""fragmentation""\nsecond line"' in text
    assert list(csv.reader(io.StringIO(text))) == [
        ["time", "host", "card", "model", "cause", "explanation"],
        [
            first.strftime("%Y-%m-%dT%H:%M:%S.250Z"),
            "infer-01",
            "3",
            "llama-8b",
            "fragmentation",
            tricky,
        ],
        [
            (monday - WEEK).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "infer-01",
            "",
            "",
            "insufficient_data",
            "no allocator stats",
        ],
    ]


@pytest.mark.django_db
def test_the_export_link_carries_the_filters(client_as, fleet):
    page = client_as("manager").get("/oom/?host=infer-01&cause=true_peak").content.decode()
    assert 'href="/oom/export.csv?host=infer-01&amp;cause=true_peak"' in page


@pytest.mark.django_db
def test_the_navigation_offers_oom_history_after_models(client_as):
    response = client_as("oncall").get("/oom/")
    labels = [item["label"] for item in response.context["nav_items"]]
    assert labels[labels.index("Models") + 1] == "OOM history"
    assert next(item for item in response.context["nav_items"] if item["active"])["key"] == "oom"


@pytest.mark.django_db
def test_the_page_does_not_list_every_host_to_filter_by(client_as, fleet):
    """A host is typed, not picked from a select of the whole fleet (10,000 options at
    10,000 hosts); the typed name still filters and stays in its field."""
    for n in range(30):
        HostFactory(name=f"quiet-{n:03d}")
    oom(fleet["edge"], this_monday() - WEEK)
    client = client_as("manager")
    assert "quiet-012" not in client.get("/oom/").content.decode()
    response = client.get("/oom/?host=edge-02")
    assert response.context["history"].total == 1
    assert 'name="host" value="edge-02"' in response.content.decode()
