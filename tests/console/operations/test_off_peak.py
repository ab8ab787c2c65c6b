"""Off-peak reloads from 30 days of rollups: planned in the trough, approved, run one at a
time in the window, fragmentation before and after recorded (no worker processes)."""

import datetime as dt
import json
import re

import pytest
from django.db import connection
from django.utils import timezone

from console.core.preferences.models import Preference
from console.operations import off_peak, services
from console.operations.models import DefragPlan, DefragReload, HostAction
from console.operations.tasks import plan_off_peak
from inventory.timeseries import partitions
from tests.factories import GIB, DeploymentFactory, GpuFactory

pytestmark = pytest.mark.django_db


def _history(gpus, now):
    """30 days of hourly rollups: busy except Sundays 03:00-05:00 UTC; card 0's fragmentation
    climbs 0.02 a day, card 1's stays flat."""
    partitions.ensure_partitions(now - dt.timedelta(days=31), now)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO inventory_card_rollup_1h
            SELECT g.id, b, 360, false, g.memory_total_bytes, 0, 0, 360, 0, 0, 90,
                   (CASE WHEN extract(isodow FROM b AT TIME ZONE 'UTC') = 7
                          AND extract(hour FROM b AT TIME ZONE 'UTC') IN (3, 4)
                         THEN 5 ELSE 80 END) * 360, 360,
                   CASE WHEN g.index = 0
                        THEN 0.1 + 0.02 * extract(epoch FROM b - (%s::timestamptz - interval '30 days')) / 86400
                        ELSE 0.1 END
            FROM inventory_gpu g CROSS JOIN generate_series(
                date_trunc('hour', %s::timestamptz) - interval '30 days',
                date_trunc('hour', %s::timestamptz) - interval '1 hour', interval '1 hour') b
            WHERE g.id = ANY(%s)
            """,  # noqa: E501
            [now, now, now, [g.pk for g in gpus]],
        )


def _process_sample(gpu, deployment, pid, at, fragmentation, reserve):
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO inventory_process_sample (gpu_id, ts, batch_id, pid, kind, name,
                deployment_id, used_max, used_last, samples, alloc_reserved_last,
                alloc_allocated_last, alloc_inactive_split_last, alloc_largest_free_last,
                frag_index_max)
            VALUES (%s, %s, gen_random_uuid(), %s, 'compute', 'python3', %s, 0, 0, 10,
                    %s, %s, 0, 0, %s)
            """,
            [gpu.pk, at, pid, deployment.pk, 40 * GIB + reserve, 40 * GIB, fragmentation],
        )


def test_a_planned_reload_runs_in_the_trough_and_records_fragmentation(personas, settings):
    settings.OPERATIONS_SETTLE_S = 0
    now = timezone.now()
    fragmenting = GpuFactory(index=0)
    steady = GpuFactory(index=1, host=fragmenting.host)
    host = fragmenting.host
    first = DeploymentFactory(host=host, gpus=[fragmenting], runtime_name="first")
    DeploymentFactory(host=host, gpus=[steady], runtime_name="steady")
    _history([fragmenting, steady], now)
    _process_sample(fragmenting, first, 100, now - dt.timedelta(minutes=1), 0.7, 3 * GIB)

    assert plan_off_peak() == 1
    assert plan_off_peak() == 0  # a plan still to come is not proposed twice
    plan = DefragPlan.objects.get(host=host)
    start = plan.window_start.astimezone(dt.UTC)
    assert (start.isoweekday(), start.hour) == (7, 3)  # the Sunday trough
    (reload,) = plan.reloads.all()
    assert (reload.deployment, reload.reason) == (first, "fragmentation_trend")

    # Beat does nothing before the approval, nor before the window opens.
    off_peak.advance(plan, start)
    assert DefragReload.objects.get(pk=reload.pk).action is None
    plan = off_peak.do_decide_plan(plan, acting_user=personas["approver"], approve=True)
    off_peak.advance(plan, start - dt.timedelta(minutes=1))
    assert DefragReload.objects.get(pk=reload.pk).action is None

    partitions.ensure_partitions(start - dt.timedelta(hours=1), start + dt.timedelta(hours=1))
    _process_sample(fragmenting, first, 100, start - dt.timedelta(minutes=1), 0.7, 3 * GIB)
    off_peak.advance(plan, start)
    reload.refresh_from_db()
    assert (reload.action.action, reload.action.state) == ("restart", HostAction.State.SENT)
    assert reload.action.approved_by == personas["approver"]
    assert (reload.fragmentation_before, reload.reserve_before_bytes) == (
        pytest.approx(0.7),
        3 * GIB,
    )
    services.do_record_outcome(
        {"request_id": str(reload.action.request_id), "host": host.name, "state": "succeeded",
         "finished_at": (start + dt.timedelta(seconds=10)).timestamp()}
    )  # fmt: skip
    off_peak.advance(plan, start + dt.timedelta(minutes=2))
    assert DefragReload.objects.get(pk=reload.pk).state == "running"  # no new process yet
    _process_sample(fragmenting, first, 101, start + dt.timedelta(seconds=30), 0.0, 0)
    off_peak.advance(plan, start + dt.timedelta(minutes=3))
    reload.refresh_from_db()
    assert reload.state == "done"
    assert (reload.fragmentation_after, reload.reserve_after_bytes) == (0.0, 0)
    off_peak.advance(plan, start + dt.timedelta(minutes=4))
    assert DefragPlan.objects.get(pk=plan.pk).state == "done"


def test_the_fragmentation_chart_has_its_text_table_with_the_same_figures(client, personas):
    gpu = GpuFactory(index=0)
    host = gpu.host
    finished = dt.datetime(2026, 3, 1, 3, 10, tzinfo=dt.UTC)
    plan = DefragPlan.objects.create(host=host, window_start=finished, window_end=finished,
                                     state=DefragPlan.State.DONE)  # fmt: skip
    for order, (name, before, after) in enumerate([("first", 0.7, 0.0), ("second", 0.4125, 0.05)]):
        DefragReload.objects.create(
            plan=plan, deployment=DeploymentFactory(host=host, gpus=[gpu], runtime_name=name),
            gpu=gpu, order=order, not_before=finished, state="done", reason="fragmentation_trend",
            estimated_bytes=GIB, fragmentation_before=before, fragmentation_after=after,
            finished_at=finished + dt.timedelta(minutes=order),
        )  # fmt: skip
    # One not measured after: neither a bar nor a row.
    DefragReload.objects.create(
        plan=plan, deployment=DeploymentFactory(host=host, gpus=[gpu], runtime_name="unmeasured"),
        gpu=gpu, order=3, not_before=finished, reason="fragmentation_trend", estimated_bytes=GIB,
    )  # fmt: skip
    manager = personas["manager"]
    Preference.objects.create(user=manager, time_zone="Asia/Shanghai", time_zone_source="chosen")
    client.force_login(manager)
    response = client.get(f"/hosts/{host.name}/operations/")
    body = response.content.decode()
    table = body.split('<details id="fragmentation-chart-table"', 1)[1].split("</details>", 1)[0]
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", table)
    assert heads == ["reload (time in Asia/Shanghai)", "before", "after"]
    cells = [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in table.split("<tr>")[2:]]
    # Finished at 03:10 and 03:11 UTC: 11:10 and 11:11 in Shanghai, the zone named.
    assert cells == [
        ["first 03-01 11:10", "0.700", "0.000"],
        ["second 03-01 11:11", "0.412", "0.050"],
    ]
    assert '<td class="num">0.700</td>' in table
    # The chart's bars are the same figures, from the same function.
    figure = json.loads(response.context["fragmentation_chart"]["figure"])
    bars = {trace["name"]: trace for trace in figure["data"]}
    assert bars["before"]["x"] == ["first 03-01 11:10", "second 03-01 11:11"]
    assert [bars["before"]["y"], bars["after"]["y"]] == [[0.7, 0.4125], [0.0, 0.05]]
    assert figure["layout"]["xaxis"]["title"]["text"] == "reload (time in Asia/Shanghai)"


def test_no_reload_measured_means_no_chart_and_no_table(client_as):
    host = GpuFactory().host
    body = client_as("manager").get(f"/hosts/{host.name}/operations/").content.decode()
    assert 'id="fragmentation-chart"' not in body and "fragmentation-chart-table" not in body
