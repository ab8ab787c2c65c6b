"""Every chart's text table holds the chart's own figures: read back from plotly's traces in
the page and compared cell by cell (the table and the traces are built by one function from
the same data, so a drift between them is a bug in that function)."""

import time

import pytest

from inventory.demo import ensure_demo_fleet
from inventory.demo_history import SWITCHED_HOST, backfill
from inventory.models import ServedModel
from tests.factories import UserFactory

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PASSWORD = "a long demo password"

# In the page: the rows each chart's traces imply, in the table's own formatting.
FROM_TRACES = """([id, kind]) => {
  const el = document.getElementById(id);
  const fixed = (v, d) => (v === null || v === undefined ? "—" : Number(v).toFixed(d));
  const rows = [];
  if (kind === "heatmap") {
    const t = el.data[0];
    const digits = id === "heatmap-frag" ? 3 : 1;
    t.x.forEach((x, j) => t.y.forEach((y, i) => rows.push([x, y, fixed(t.z[i][j], digits)])));
  } else if (kind === "lines") {
    el.data.forEach((t) => t.x.forEach((x, i) => rows.push([x, t.name, fixed(t.y[i], 2)])));
  } else if (kind === "latency") {
    el.data.filter((t) => / P(50|95|99)$/.test(t.name)).forEach((t) => {
      const line = t.name.replace(/ P\\d\\d$/, ""), q = t.name.slice(-3);
      t.x.forEach((x, i) => rows.push([x, line, q, fixed(t.y[i], 1)]));
    });
  } else if (kind === "ledger") {
    el.data.forEach((t) => t.x.forEach((x, i) => rows.push([x, t.name, fixed(t.y[i], 2)])));
  }
  return rows;
}"""
TABLE = """(id) => Array.from(document.querySelectorAll(`#${id}-table tbody tr`)).map(
  (tr) => Array.from(tr.cells).map((td) => td.textContent))"""


def _table_rows(page, chart: str, kind: str) -> list[list[str]]:
    rows = page.evaluate(TABLE, chart)
    if kind == "heatmap" or kind == "lines":
        return rows
    if kind == "ledger":  # card, kind, deployment, GiB, basis, source
        return [[r[0], r[1], r[3]] for r in rows]
    # latency: time, line, P50, P95, P99, SLO; the change rows have no figures
    return [
        [r[0], r[1], q, r[col]]
        for r in rows
        if r[2] != ""
        for q, col in (("P50", 2), ("P95", 3), ("P99", 4))
    ]


def _assert_match(page, chart: str, kind: str) -> int:
    expected = page.evaluate(FROM_TRACES, [chart, kind])
    table = _table_rows(page, chart, kind)
    assert expected, f"{chart}: the chart has no points"
    assert sorted(map(tuple, table)) == sorted(map(tuple, expected)), chart
    return len(table)


def test_every_chart_table_holds_the_charts_figures(console_page):
    UserFactory(username="manager", password=PASSWORD, roles=["manager"])
    ensure_demo_fleet()
    backfill(days=1.5, now=time.time(), only={SWITCHED_HOST})  # switch 18 h ago
    page = console_page("chart-tables")
    page.login("manager", PASSWORD)

    page.open(f"/hosts/{SWITCHED_HOST}/")
    browser = page.page
    for chart in ("ledger-chart", "heatmap-used", "heatmap-frag", "deployment-lines"):
        browser.wait_for_selector(f"#{chart} .main-svg")
    browser.wait_for_selector("#latency-chart .main-svg")
    assert _assert_match(browser, "ledger-chart", "ledger") > 0
    assert _assert_match(browser, "heatmap-used", "heatmap") > 0
    assert _assert_match(browser, "heatmap-frag", "heatmap") > 0
    assert _assert_match(browser, "deployment-lines", "lines") > 0
    assert _assert_match(browser, "latency-chart", "latency") > 0
    # The change the backfill made is a row of the latency table, as it is a line on the chart.
    changes = browser.locator("#latency-chart-table tbody tr", has_text="change on")
    assert changes.count() >= 1
    oom_points = browser.evaluate(
        "() => document.getElementById('oom-chart').data.reduce((n, t) => n + t.x.length, 0)"
    )
    assert browser.locator("#oom-chart-table tbody tr").count() == oom_points > 0
    page.screenshot("host-chart-tables")

    model = ServedModel.objects.filter(deployments__host__name=SWITCHED_HOST).first()
    page.open(f"/models/{model.pk}/")
    browser.wait_for_selector("#latency-chart .main-svg")
    assert _assert_match(browser, "latency-chart", "latency") > 0
    page.screenshot("model-latency-history")

    page.open(f"/oom/?host={SWITCHED_HOST}")
    browser.wait_for_selector("#latency-chart .main-svg")
    assert _assert_match(browser, "latency-chart", "latency") > 0
    assert page.errors == []
