"""Every chart names its axes in the drawn SVG, the time axis with the reader's zone: plotly.js
4 draws an axis or colour bar title only when it is given as {text}, and drops a plain string
without a word, so only the rendered page shows whether a title is there."""

import time

import pytest

from console.core.models import Preference
from inventory.demo import ensure_demo_fleet
from inventory.demo_history import SWITCHED_HOST, backfill
from inventory.models import ServedModel
from tests.factories import UserFactory

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PASSWORD = "a long demo password"
ZONE = "Asia/Shanghai"
TIME_AXIS = f"time ({ZONE})"

# The titles plotly drew in one chart: x and y axis titles (text.xtitle, text.ytitle) and the
# colour bar's (inside g.cbtitle).
TITLES = """(id) => {
  const chart = document.getElementById(id);
  const texts = (selector) => Array.from(chart.querySelectorAll(selector), (n) => n.textContent);
  return {x: texts("text.xtitle"), y: texts("text.ytitle"), colorbar: texts("g.cbtitle text")};
}"""


def _titles(browser, chart: str) -> dict:
    browser.wait_for_selector(f"#{chart} .main-svg")
    return browser.evaluate(TITLES, chart)


def test_the_charts_draw_their_axis_titles_with_the_readers_zone(console_page):
    manager = UserFactory(username="manager", password=PASSWORD, roles=["manager"])
    Preference.objects.create(user=manager, time_zone=ZONE, time_zone_source="chosen")
    ensure_demo_fleet()
    backfill(days=1.5, now=time.time(), only={SWITCHED_HOST})  # switch 18 h ago
    page = console_page("axis-titles")
    page.login("manager", PASSWORD)
    browser = page.page

    page.open(f"/hosts/{SWITCHED_HOST}/")
    assert _titles(browser, "ledger-chart") == {"x": [], "y": ["GiB"], "colorbar": []}
    assert _titles(browser, "heatmap-used") == {"x": [TIME_AXIS], "y": [], "colorbar": ["%"]}
    assert _titles(browser, "heatmap-frag") == {"x": [TIME_AXIS], "y": [], "colorbar": ["index"]}
    assert _titles(browser, "deployment-lines") == {"x": [TIME_AXIS], "y": ["GiB"], "colorbar": []}
    assert _titles(browser, "latency-chart") == {"x": [TIME_AXIS], "y": ["ms"], "colorbar": []}
    assert _titles(browser, "oom-chart") == {"x": [], "y": ["card"], "colorbar": []}
    page.screenshot("host-axis-titles")

    model = ServedModel.objects.filter(deployments__host__name=SWITCHED_HOST).first()
    page.open(f"/models/{model.pk}/")
    assert _titles(browser, "latency-chart") == {"x": [TIME_AXIS], "y": ["ms"], "colorbar": []}

    page.open(f"/oom/?host={SWITCHED_HOST}")
    assert _titles(browser, "latency-chart") == {"x": [TIME_AXIS], "y": ["ms"], "colorbar": []}
    # The weekly charts count UTC weeks whatever the reader's zone, and their axis says so.
    week_axis = ["week (from Monday 00:00 UTC)"]
    assert _titles(browser, "chart-by-cause") == {"x": week_axis, "y": ["OOMs per week"],
                                                  "colorbar": []}  # fmt: skip
    assert _titles(browser, "chart-by-host")["x"] == week_axis
    page.screenshot("oom-history-axis-titles")
    assert page.errors == []
