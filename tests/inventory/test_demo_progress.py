"""The demo's history backfill reports how far it is, and the fleet board shows it."""

import time

import pytest

from inventory.demo import ensure_demo_fleet
from inventory.demo_history import backfill
from inventory.reports.backfill import BackfillProgress

pytestmark = pytest.mark.django_db


def test_the_backfill_reports_each_host_until_it_finishes(client_as):
    ensure_demo_fleet()
    seen = []
    original = BackfillProgress._save

    def spy(self):
        seen.append(dict(self.state["hosts"]))
        original(self)

    BackfillProgress._save = spy
    try:
        backfill(days=0.5, now=time.time(), only={"a100-node"})
    finally:
        BackfillProgress._save = original
    assert seen[0] == {"a100-node": 0.0}
    assert any(0 < state["a100-node"] < 1 for state in seen), "partial progress was reported"
    final = client_as("oncall").get("/demo/history-progress/").json()
    assert final == {"days": 0.5, "hosts": {"a100-node": 1.0}, "finished": True}
    assert 'id="demo-progress"' not in client_as("oncall").get("/").content.decode()


def test_the_fleet_board_shows_a_backfill_under_way(client_as):
    progress = BackfillProgress(30, ["infer-00", "infer-01"])
    progress.of("infer-00", 0, 100)(50)
    page = client_as("manager").get("/").content.decode()
    assert 'id="demo-progress"' in page
    assert 'data-host="infer-00"' in page and 'value="0.5"' in page
