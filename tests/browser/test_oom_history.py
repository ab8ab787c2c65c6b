"""The OOM history page in a real browser: plotly draws both charts with the change marker."""

import datetime as dt

import pytest
from django.utils import timezone

from tests.factories import DeploymentFactory, GpuFactory, UserFactory
from tests.inventory.test_oom_history import audited, collected, oom

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PASSWORD = "a long demo password"
DAY = dt.timedelta(days=1)

# Each chart's traces as plotly holds them on the div: type, name and the sum of their counts.
TRACES = """id => document.getElementById(id).data.map(trace => ({
    type: trace.type,
    name: trace.name,
    total: trace.y.reduce((sum, count) => sum + count, 0),
}))"""


@pytest.fixture
def switched_host():
    """The field report's host: OOMs every day until the switch to GPU groups, none after."""
    now = timezone.now()
    gpu = GpuFactory(host__name="infer-01", index=0)
    deployment = DeploymentFactory(host=gpu.host, gpus=[gpu], served_model__name="llama-8b")
    collected(gpu.host, now - 40 * DAY, now)
    switch = now - 20 * DAY
    for day in range(1, 20):
        cause = "true_peak" if day % 3 else "fragmentation"
        oom(gpu.host, switch - day * DAY, cause, deployment, gpu)
    audited(deployment, switch, comment="isolated to its own GPU group; KV at P95 + 20%")
    return gpu.host


def test_the_manager_sees_both_charts_drawn_with_the_change_marked(console_page, switched_host):
    UserFactory(username="manager", password=PASSWORD, roles=["manager"])
    page = console_page("manager")
    page.login("manager", PASSWORD)
    assert page.open("/oom/").status == 200
    page.page.wait_for_selector("#chart-by-cause .plot-container")
    page.page.wait_for_selector("#chart-by-host .plot-container")

    by_cause = page.page.evaluate(TRACES, "chart-by-cause")
    assert {trace["name"]: trace["total"] for trace in by_cause if trace["type"] == "bar"} == {
        "True peak": 13,
        "Fragmentation": 6,
    }
    by_host = page.page.evaluate(TRACES, "chart-by-host")
    assert by_host[0] == {"type": "scatter", "name": "infer-01", "total": 19}

    shapes = page.page.evaluate(
        "id => document.getElementById(id).layout.shapes.length", "chart-by-cause"
    )
    assert shapes == 1
    marker = page.page.evaluate(
        "id => document.getElementById(id).data.at(-1).hovertext[0]", "chart-by-cause"
    )
    assert "infer-01" in marker and "by system" in marker and "GPU group" in marker

    comparison = page.page.locator("#changes-table tbody tr").first.inner_text()
    assert "7.0" in comparison and "(1.00/day)" in comparison and "(0.00/day)" in comparison
    page.screenshot("oom-history")
    assert page.errors == []


def test_an_empty_window_shows_the_message_and_no_chart(console_page):
    UserFactory(username="manager", password=PASSWORD, roles=["manager"])
    page = console_page("manager")
    page.login("manager", PASSWORD)
    page.open("/oom/")
    assert page.page.locator(".plot-container").count() == 0
    assert page.page.get_by_text("No OOMs in this window.").first.is_visible()
    page.screenshot("oom-history-empty")
    assert page.errors == []
