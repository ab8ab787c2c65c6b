"""Every page of the console shell, as each persona, in a real browser."""

import datetime as dt

import pytest
from django.utils import timezone

from inventory.models import Deployment, Event
from runbooks.models import MPS_NOTE_SLUG
from tests.batches import GIB, write_history
from tests.factories import DeploymentFactory, GpuFactory, UserFactory

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PASSWORD = "a long demo password"
PAGES = [
    "/",
    "/hosts/{host}/",
    "/models/",
    "/models/{model}/",
    "/runbooks/",
    f"/runbooks/{MPS_NOTE_SLUG}/",
    f"/runbooks/{MPS_NOTE_SLUG}/history/",
    "/audit/",
    "/oom/",
    "/proposals/",
]
# The plotly charts each page must draw with data (element ids).
CHARTS = {
    "/hosts/{host}/": ["ledger-chart", "heatmap-used", "heatmap-frag", "deployment-lines",
                       "oom-chart"],
    "/oom/": ["chart-by-cause", "chart-by-host"],
}  # fmt: skip


@pytest.fixture
def fleet():
    gpu = GpuFactory(host__name="mps-l40s", product_name="NVIDIA L40S")
    deployments = [
        DeploymentFactory(
            host=gpu.host,
            gpus=[gpu],
            isolation_mode=Deployment.Isolation.MPS,
            mps_active_thread_percentage=share,
        )
        for share in (40, 60)
    ]
    start = (timezone.now() - dt.timedelta(hours=2)).timestamp()
    write_history(gpu.host, [(gpu, d) for d in deployments], start=start, minutes=120,
                  demand=lambda m, i: (10 + i + m % 7) * GIB, running=lambda m, i: 4.0 + m % 5,
                  p99=lambda m, i: 0.2 + 0.01 * (m % 9))  # fmt: skip
    Event.objects.create(host=gpu.host, gpu=gpu, kind=Event.Kind.OOM, cause="fragmentation",
                         cause_explanation="needed 1.0 GiB; no block large enough",
                         at=timezone.now() - dt.timedelta(minutes=30),
                         batch_id="00000000-0000-4000-8000-0000000000d1", position=0)  # fmt: skip
    return {"host": gpu.host.name, "model": deployments[0].served_model.pk}


def _drawn_traces(page, element_id: str) -> int:
    return page.page.evaluate(
        "id => { const e = document.getElementById(id); return e && e.data ? e.data.length : 0 }",
        element_id,
    )


@pytest.mark.parametrize("persona", ["oncall", "approver", "manager"])
def test_every_page_renders_without_console_errors(console_page, fleet, persona):
    UserFactory(username=persona, password=PASSWORD, roles=[persona])
    page = console_page(persona)
    page.login(persona, PASSWORD)
    assert page.page.locator(".userbox").inner_text().startswith(persona)
    for template in PAGES:
        path = template.format(**fleet)
        response = page.open(path)
        assert response.status == 200, (persona, path)
        assert page.page.locator("h1").first.is_visible()
        for chart in CHARTS.get(template, []):
            page.page.wait_for_function(
                "id => { const e = document.getElementById(id); return e && e.data }", arg=chart
            )
            assert _drawn_traces(page, chart) > 0, (persona, path, chart)
        page.screenshot(path)
    assert page.errors == []


def test_the_mps_host_page_shows_the_mps_note(console_page, fleet):
    UserFactory(username="oncall", password=PASSWORD, roles=["oncall"])
    page = console_page("oncall")
    page.login("oncall", PASSWORD)
    page.open(f"/hosts/{fleet['host']}/")
    notes = page.page.locator("#runbook-notes").inner_text()
    assert "MPS is not hard isolation" in notes
    page.page.click("text=MPS is not hard isolation")
    page.page.wait_for_load_state("networkidle")
    assert "every client on that GPU" in page.page.locator("#note-body").inner_text()
    assert page.errors == []


def test_a_wrong_password_is_refused(console_page):
    UserFactory(username="oncall", password=PASSWORD, roles=["oncall"])
    page = console_page("anonymous")
    page.login("oncall", "not the password")
    assert "did not match" in page.page.content()
    assert page.page.url.endswith("/accounts/login/")


def test_an_oncall_edit_in_the_browser_lands_in_the_history(console_page, fleet):
    UserFactory(username="oncall", password=PASSWORD, roles=["oncall"])
    page = console_page("oncall")
    page.login("oncall", PASSWORD)
    page.open("/runbooks/oom-triage/edit/")
    page.page.fill("#id_summary", "browser edit")
    body = page.page.input_value("#id_body")
    page.page.fill("#id_body", body + "\nAdded from the browser.\n")
    page.page.click("form.form button[type=submit]")
    page.page.wait_for_load_state("networkidle")
    assert "version 2" in page.page.content()
    page.open("/runbooks/oom-triage/history/2/")
    assert "Added from the browser." in page.page.locator("#diff").inner_text()
    page.screenshot("history-diff")
    assert page.errors == []


def test_the_host_page_loads_its_analyses(console_page, fleet):
    UserFactory(username="approver", password=PASSWORD, roles=["approver"])
    page = console_page("approver")
    page.login("approver", PASSWORD)
    page.open(f"/hosts/{fleet['host']}/")
    page.page.wait_for_selector("#kv-advice")
    assert page.page.locator("#copeaks tbody tr").count() == 1
    page.page.click(".window-picker button[data-window='1h']")
    page.page.wait_for_timeout(500)
    assert _drawn_traces(page, "heatmap-used") > 0
    page.screenshot("host-analysis")
    assert page.errors == []


def test_the_fleet_board_refreshes_and_pauses_while_hidden(console_page, fleet):
    UserFactory(username="oncall", password=PASSWORD, roles=["oncall"])
    page = console_page("oncall")
    page.login("oncall", PASSWORD)
    page.page.clock.install()
    page.open("/")
    assert page.page.locator("#fleet-rows tr[data-host='mps-l40s']").count() == 1
    page.page.clock.fast_forward(16_000)
    page.page.wait_for_function(
        "() => document.getElementById('refresh-state').textContent.startsWith('Updated')"
    )
    page.page.evaluate(
        "() => { Object.defineProperty(document, 'hidden', {value: true, configurable: true});"
        " document.dispatchEvent(new Event('visibilitychange')); }"
    )
    assert page.page.locator("#refresh-state").inner_text() == "Paused while the tab is hidden."
    assert page.errors == []
