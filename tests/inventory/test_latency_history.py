"""The latency history on the host page, the model page and one host's OOM history: each
model's P50, P95 and P99 against its SLO, placement changes marked, and the P99 either side of
the latest change."""

import datetime as dt
import zoneinfo

import pytest
from django.db import connection

from console.core.auditing import Action, snapshot
from console.core.auditing.changes import open_change, record
from console.core.models import Preference
from inventory.timeseries import partitions
from tests.factories import DeploymentFactory, GpuFactory, ServedModelFactory

pytestmark = pytest.mark.django_db


def _engine_hour(deployment, at, p99_s):
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO inventory_engine_rollup_1h (deployment_id, bucket, samples, running_max,"
            " running_sum, running_count, waiting_max, kv_usage_max, requests, latency_p50_max,"
            " latency_p95_max, latency_p99_max)"
            " VALUES (%s, %s, 60, 10, 600, 60, 0, 0.5, 100, %s, %s, %s)",
            [deployment.pk, at, p99_s * 0.25, p99_s * 0.6, p99_s],
        )


def test_p99_before_and_after_the_switch_with_the_change_marked(client_as):
    gpu = GpuFactory()
    model = ServedModelFactory(name="llama3-70b", p99_latency_slo_ms=500)
    before = DeploymentFactory(host=gpu.host, served_model=model, gpus=[gpu], status="stopped")
    after = DeploymentFactory(host=gpu.host, served_model=model, gpus=[gpu])
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    switch = now - dt.timedelta(days=3)
    partitions.ensure_partitions(now - dt.timedelta(days=8), now)
    for hours in range(1, 24 * 7):
        at = now - dt.timedelta(hours=hours)
        _engine_hour(before if at < switch else after, at, 0.8 if at < switch else 0.32)
    with open_change(at=switch):
        record(actor=None, action=Action.DEPLOYMENT_CHANGE, obj=after, before=snapshot(before),
               after=snapshot(after), host=gpu.host, comment="bound to its own cards")  # fmt: skip
    data = client_as("manager").get(f"/hosts/{gpu.host.name}/charts/?window=7d").json()
    (line,) = data["latency"]["lines"]
    assert (line["model"], line["slo_ms"]) == ("llama3-70b", 500)
    assert (line["before_ms"], line["after_ms"]) == (800.0, 320.0)
    assert max(line["p95_ms"]) == pytest.approx(480.0)
    assert max(line["p50_ms"]) == pytest.approx(200.0)
    assert len(line["p50_ms"]) == len(line["times"]) == len(line["p99_ms"])
    assert [dt.datetime.fromisoformat(c["at"]) for c in data["latency"]["changes"]] == [switch]
    assert data["time_zone"] == "UTC"


def test_the_oom_history_of_a_host_shows_its_p99_across_the_change(client_as):
    gpu = GpuFactory()
    model = ServedModelFactory(name="llama3-70b", p99_latency_slo_ms=500)
    before = DeploymentFactory(host=gpu.host, served_model=model, gpus=[gpu], status="stopped")
    after = DeploymentFactory(host=gpu.host, served_model=model, gpus=[gpu])
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    switch = now - dt.timedelta(days=2)
    partitions.ensure_partitions(now - dt.timedelta(days=5), now)
    for hours in range(1, 24 * 4):
        at = now - dt.timedelta(hours=hours)
        _engine_hour(before if at < switch else after, at, 0.8 if at < switch else 0.32)
    with open_change(at=switch):
        record(actor=None, action=Action.DEPLOYMENT_CHANGE, obj=after, before=snapshot(before),
               after=snapshot(after), host=gpu.host)  # fmt: skip
    page = client_as("manager").get(f"/oom/?host={gpu.host.name}").content.decode()
    section = page[page.index('data-testid="latency-before-after"') :]
    assert "llama3-70b" in section
    assert "800 ms" in section and "320 ms" in section


def test_the_model_page_charts_each_host_with_its_changes(client_as):
    gpu = GpuFactory()
    other = GpuFactory()
    model = ServedModelFactory(name="llama3-70b", p99_latency_slo_ms=500)
    before = DeploymentFactory(host=gpu.host, served_model=model, gpus=[gpu], status="stopped")
    after = DeploymentFactory(host=gpu.host, served_model=model, gpus=[gpu])
    elsewhere = DeploymentFactory(host=other.host, served_model=model, gpus=[other])
    DeploymentFactory(host=gpu.host, gpus=[gpu])  # another model on the host: not on this page
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    switch = now - dt.timedelta(days=3)
    partitions.ensure_partitions(now - dt.timedelta(days=8), now)
    for hours in range(1, 24 * 7):
        at = now - dt.timedelta(hours=hours)
        _engine_hour(before if at < switch else after, at, 0.8 if at < switch else 0.32)
        _engine_hour(elsewhere, at, 0.4)
    with open_change(at=switch):
        record(actor=None, action=Action.DEPLOYMENT_CHANGE, obj=after, before=snapshot(before),
               after=snapshot(after), host=gpu.host)  # fmt: skip
    response = client_as("manager").get(f"/models/{model.pk}/")
    latency = response.context["latency"]
    lines = {line["model"]: line for line in latency["lines"]}
    assert set(lines) == {gpu.host.name, other.host.name}
    assert (lines[gpu.host.name]["before_ms"], lines[gpu.host.name]["after_ms"]) == (800.0, 320.0)
    assert set(lines[other.host.name]["p99_ms"]) == {400.0}
    assert set(lines[other.host.name]["p50_ms"]) == {100.0}
    assert [(c["host"], dt.datetime.fromisoformat(c["at"])) for c in latency["changes"]] == [
        (gpu.host.name, switch)
    ]
    assert 'id="latency-data"' in response.content.decode()


def test_the_oom_historys_latest_change_is_named_in_the_readers_zone_like_its_chart(
    client_as, personas
):
    gpu = GpuFactory()
    deployment = DeploymentFactory(host=gpu.host, gpus=[gpu])
    switch = (dt.datetime.now(dt.UTC) - dt.timedelta(days=2)).replace(
        hour=1, minute=30, second=0, microsecond=0
    )
    with open_change(at=switch):
        record(actor=None, action=Action.DEPLOYMENT_CHANGE, obj=deployment,
               before=snapshot(deployment), after=snapshot(deployment), host=gpu.host)  # fmt: skip
    Preference.objects.create(user=personas["manager"], time_zone="Asia/Shanghai",
                              time_zone_source="chosen")  # fmt: skip
    page = client_as("manager").get(f"/oom/?host={gpu.host.name}").content.decode()
    local = switch.astimezone(zoneinfo.ZoneInfo("Asia/Shanghai"))
    section = page[page.index('data-testid="latency-before-after"') :]
    sentence = section.split("the latest change:", 1)[1].split("</p>", 1)[0]
    # 01:30 UTC is 09:30 in Shanghai: the time beside the chart is in the chart's zone, named.
    assert f'<time datetime="{local.isoformat()}">{local:%Y-%m-%d} 09:30 CST</time>' in sentence
    assert 'data-time-zone="Asia/Shanghai"' in page
    # The weekly tables and the changes table stay in UTC, as their headings say.
    changes = page.split('id="changes-table"', 1)[1].split("</table>", 1)[0]
    assert f"{switch:%Y-%m-%d} 01:30 UTC" in changes
