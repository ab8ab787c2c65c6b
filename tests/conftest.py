"""Shared fixtures: the four personas, and the paths of the real-data fixtures."""

import os
from pathlib import Path

import pytest

from console.core.roles import APPROVER, MANAGER, ONCALL
from tests.factories import UserFactory

pytest_plugins = ["tests.isolated_broker"]

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")

PERSONAS = {
    "oncall": [ONCALL],
    "approver": [APPROVER],
    "manager": [MANAGER],
    "outsider": [],
}


def pytest_collection_modifyitems(config, items):
    # Under xdist (--dist loadgroup) each worker has its own database, broker database and
    # ingest queue (tests/xdist_worker.py), so tests that start real processes can run on any
    # worker; a module's end-to-end tests stay together on one, where they share its set-up.
    # Browser tests need nothing but their worker's own chromium: they spread one by one.
    for item in items:
        if item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def pytest_sessionstart(session):
    # The .mo files are built, not committed: a plain `pytest` reads the current .po files too.
    # Under xdist the controller builds them; workers would race writing the same files.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from console.catalogue import compile_catalogues

    compile_catalogues()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2 at production strength costs ~0.3 s a user; tests create many users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _partitions_cache_follows_rollbacks():
    # Partitions a test creates vanish with its transaction; the in-process cache must too.
    from inventory.timeseries import partitions

    partitions.forget_known()
    yield
    partitions.forget_known()


@pytest.fixture(autouse=True)
def _telemetry_tables_emptied_after_transactional_tests(request):
    """Django's flush after a transactional test skips unmanaged models, so the partitioned
    sample and rollup tables, and the minutes marked for a refresh, would carry one test's rows
    into the next."""
    yield
    marker = request.node.get_closest_marker("django_db")
    if marker is None or not marker.kwargs.get("transaction"):
        return
    from django.db import connection

    from inventory.timeseries.partitions import TABLES

    with connection.cursor() as cursor:
        tables = [table.name for table in TABLES]
        tables += ["inventory_rollup_dirty", "inventory_rollup_hour_folded", "inventory_pack_due"]
        cursor.execute(f"TRUNCATE {', '.join(tables)}")


@pytest.fixture
def personas(db) -> dict:
    """One user per persona; `outsider` is logged in but holds no role."""
    return {name: UserFactory(username=name, roles=roles) for name, roles in PERSONAS.items()}


@pytest.fixture
def client_as(client, personas):
    """client_as("manager") logs the test client in as that persona ("anonymous": nobody)."""

    def login(persona: str):
        client.logout()
        if persona != "anonymous":
            client.force_login(personas[persona])
        return client

    return login


@pytest.fixture(scope="session", autouse=True)
def chromium_browser(request):
    """Debian's chromium under Playwright, started before anything touches the database.

    Playwright's sync API switches the context that Django keeps its connections in; started
    first, every test sees the same connections (and the serialized data that transactional
    browser tests restore). None when no browser test is selected or chromium is absent.
    """
    wanted = any(item.get_closest_marker("browser") for item in request.session.items)
    if not wanted or not Path(CHROMIUM).exists():
        yield None
        return
    from playwright.sync_api import sync_playwright

    # Playwright's loop runs in this thread; Django's test database set-up and tear-down
    # refuse to run here unless told that no async code is being served from it.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser
        browser.close()
