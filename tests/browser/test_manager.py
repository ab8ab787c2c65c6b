"""The manager's look at the field report's result on the demo's 8-card host: OOMs and P99
before and after its switch to GPU groups, on the OOM history and the host page."""

import time

import pytest

from inventory.demo import ensure_demo_fleet
from inventory.demo_history import SWITCHED_HOST, backfill
from tests.factories import UserFactory

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PASSWORD = "a long demo password"


def _ms(text: str) -> float:
    return float(text.replace("ms", "").strip())


def test_the_manager_sees_both_halves_of_the_result(console_page):
    UserFactory(username="manager", password=PASSWORD, roles=["manager"])
    ensure_demo_fleet()
    backfill(days=3, now=time.time(), only={SWITCHED_HOST})
    page = console_page("manager-result")
    page.login("manager", PASSWORD)

    page.open(f"/oom/?host={SWITCHED_HOST}")
    change = page.page.locator("#changes-table tbody tr").first
    cells = change.locator("td.num").all_inner_texts()
    before_ooms, after_ooms = int(cells[1].split()[0]), int(cells[2].split()[0])
    assert before_ooms > 0 and after_ooms == 0
    latency = page.page.locator("[data-testid=latency-before-after] > table tbody tr")
    assert latency.count() >= 1
    for row in latency.all():
        before, after = row.locator("td.num").all_inner_texts()[1:3]
        assert _ms(after) < _ms(before), row.inner_text()
    page.screenshot("oom-history-8-card-host")

    page.open(f"/hosts/{SWITCHED_HOST}/")
    with page.page.expect_response(lambda response: "window=7d" in response.url):
        page.page.click("#history button[data-window='7d']")
    page.page.wait_for_selector("#latency-chart .main-svg")
    page.page.wait_for_load_state("networkidle")
    assert page.page.get_attribute("#history button[data-window='7d']", "aria-pressed") == "true"
    assert page.page.get_attribute("#history button[data-window='24h']", "aria-pressed") == "false"
    rows = page.page.locator("#latency-table tbody tr")
    assert rows.count() >= 1 and "—" not in rows.first.inner_text()
    page.screenshot("host-latency-history")
    assert page.errors == []
