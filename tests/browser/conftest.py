"""Browser tests: Playwright driving Debian's chromium (never a downloaded browser).

Skipped, with the reason, where chromium is absent; `make test` says so up front.
"""

import re
from pathlib import Path

import pytest

from tests.conftest import CHROMIUM

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"

pytestmark = pytest.mark.browser


def pytest_collection_modifyitems(items):
    if Path(CHROMIUM).exists():
        return
    skip = pytest.mark.skip(reason=f"chromium not found at {CHROMIUM}")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


class ConsolePage:
    """A logged-in page that records console errors and failed requests."""

    def __init__(self, browser, base_url: str, label: str):
        self.context = browser.new_context(viewport={"width": 1366, "height": 800})
        self.page = self.context.new_page()
        self.base_url = base_url
        self.label = label
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on(
            "console",
            lambda msg: (
                self.errors.append(f"console {msg.type}: {msg.text}")
                if msg.type == "error"
                else None
            ),
        )
        self.page.on("requestfailed", self._request_failed)

    def _request_failed(self, request) -> None:
        # A click that navigates cancels what the page still had in flight (its favicon, say):
        # Chromium reports those as ERR_ABORTED, which no server fault produces.
        if request.failure == "net::ERR_ABORTED":
            return
        self.errors.append(f"request failed: {request.url} ({request.failure})")

    def login(self, username: str, password: str) -> None:
        self.page.goto(f"{self.base_url}/accounts/login/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", password)
        self.page.click("section.login button[type=submit]")
        self.page.wait_for_load_state("networkidle")

    def open(self, path: str):
        response = self.page.goto(f"{self.base_url}{path}")
        self.page.wait_for_load_state("networkidle")
        return response

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.label}-{name}").strip("_")
        path = ARTIFACTS / f"{safe}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def console_page(chromium_browser, live_server):
    assert chromium_browser is not None
    pages = []

    def open_as(label: str) -> ConsolePage:
        page = ConsolePage(chromium_browser, live_server.url, label)
        pages.append(page)
        return page

    yield open_as
    for page in pages:
        page.close()
