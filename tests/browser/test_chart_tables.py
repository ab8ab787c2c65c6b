"""Every chart's text table holds the chart's own figures: read back from plotly's traces in
the page and compared cell by cell (the table and the traces are built by one function from
the same data, so a drift between them is a bug in that function)."""

import datetime as dt
import time

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.utils import timezone

from console.operations.models import DefragPlan, DefragReload
from console.proposals.models import LoadTest
from inventory.demo import ensure_demo_fleet
from inventory.demo_history import SWITCHED_HOST, backfill
from inventory.models import ServedModel
from tests.console.proposals.support import ready_proposal
from tests.factories import GIB, DeploymentFactory, GpuFactory, UserFactory

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
  } else if (kind === "loadtest") {  // per model a P99 and a P50 trace over the same steps
    el.data.filter((t) => t.name.endsWith(" P99")).forEach((p99) => {
      const model = p99.name.slice(0, -4);
      const p50 = el.data.find((t) => t.name === `${model} P50`);
      p99.x.forEach((x, i) => rows.push([String(x), model, fixed(p50.y[i], 1),
                                         fixed(p99.y[i], 1)]));
    });
  } else if (kind === "bars") {  // one row per bar position: each trace's value there
    const digits = id === "cards-chart" ? 2 : 3;
    el.data[0].x.forEach((x, i) => rows.push([x, ...el.data.map((t) => fixed(t.y[i], digits))]));
  }
  return rows;
}"""
TABLE = """(id) => Array.from(document.querySelectorAll(`#${id}-table tbody tr`)).map(
  (tr) => Array.from(tr.cells).map((td) => td.textContent))"""


def _table_rows(page, chart: str, kind: str) -> list[list[str]]:
    rows = page.evaluate(TABLE, chart)
    if kind in ("heatmap", "lines", "loadtest", "bars"):
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


def _serious_violations(browser) -> list[str]:
    # As tests/browser/test_accessibility.py checks every page of its list.
    violations = Axe().run(browser).response["violations"]
    return [v["id"] for v in violations if v["impact"] in ("serious", "critical")]


def test_the_load_test_and_off_peak_reload_charts_have_their_tables(console_page):
    manager = UserFactory(username="manager", password=PASSWORD, roles=["manager"])
    oncall = UserFactory(username="oncall", roles=["oncall"])
    gpu = GpuFactory(index=1)
    proposal = ready_proposal(oncall, host=gpu.host, gpus=[gpu])
    end = timezone.now() - dt.timedelta(minutes=5)
    series = {
        model: [{"t_s": 5 * step, "count": 9, "p50_ms": base + step,
                 "p99_ms": 3 * base + 7.25 * step} for step in range(6)]
        for model, base in (("chat-large", 310.0), ("embed-small", 42.5))
    }  # fmt: skip
    test = LoadTest.objects.create(
        proposal=proposal, uploaded_by=oncall, source_format=LoadTest.Format.MEASURED,
        files=["combined test"], status=LoadTest.Status.DONE,
        window_start=end - dt.timedelta(minutes=3), window_end=end,
        result={"models": [], "series": series, "cards": [
            {"card": f"{gpu.host.name}:1", "peak_bytes": 44 * GIB, "bound_bytes": 42 * GIB},
            {"card": f"{gpu.host.name}:2", "peak_bytes": None, "bound_bytes": int(70.5 * GIB)},
        ]},
    )  # fmt: skip
    plan = DefragPlan.objects.create(host=gpu.host, window_start=end, window_end=end)
    DefragReload.objects.create(
        plan=plan, deployment=DeploymentFactory(host=gpu.host, gpus=[gpu], runtime_name="code-8b"),
        gpu=gpu, order=0, not_before=end, state="done", reason="fragmentation_trend",
        estimated_bytes=GIB, fragmentation_before=0.61, fragmentation_after=0.04, finished_at=end,
    )  # fmt: skip
    page = console_page("more-chart-tables")
    page.login(manager.username, PASSWORD)

    page.open(f"/proposals/{proposal.pk}/load-tests/{test.pk}/")
    browser = page.page
    for chart in ("latency-chart", "cards-chart"):
        browser.wait_for_selector(f"#{chart} .main-svg")
    assert _assert_match(browser, "latency-chart", "loadtest") == 12
    assert _assert_match(browser, "cards-chart", "bars") == 2
    assert page.page.evaluate(TABLE, "cards-chart") == [
        [f"{gpu.host.name}:1", "44.00", "42.00"],
        [f"{gpu.host.name}:2", "—", "70.50"],
    ]
    page.screenshot("load-test-chart-tables")
    browser.click("#latency-chart-table summary")  # opened, so axe checks the table too
    assert _serious_violations(browser) == []

    page.open(f"/hosts/{gpu.host.name}/operations/")
    browser.wait_for_selector("#fragmentation-chart .main-svg")
    assert _assert_match(browser, "fragmentation-chart", "bars") == 1
    browser.click("#fragmentation-chart-table summary")
    assert _serious_violations(browser) == []
    assert page.errors == []
