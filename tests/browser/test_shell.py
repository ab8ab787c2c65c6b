"""Every page of the console shell, as each persona, in a real browser."""

import pytest

from inventory.models import Deployment
from runbooks.models import MPS_NOTE_SLUG
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
]


@pytest.fixture
def fleet():
    gpu = GpuFactory(host__name="mps-l40s", product_name="NVIDIA L40S")
    deployment = DeploymentFactory(
        host=gpu.host,
        gpus=[gpu],
        isolation_mode=Deployment.Isolation.MPS,
        mps_active_thread_percentage=40,
    )
    return {"host": gpu.host.name, "model": deployment.served_model.pk}


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
