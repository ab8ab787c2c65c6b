"""The fault campaign's machinery (tests/bench/faults.py) on one short broker outage.

Its own PostgreSQL and redis-server, a real agent and a real ingest worker: the campaign's
accounting must see every batch of the outage backfilled once and every poll kept.
"""

import shutil

import pytest

from tests.bench.faults import run

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server"),
]


def test_a_short_broker_outage_loses_doubles_and_skips_nothing():
    figures = run(outage_s=6, healthy_s=3, keep=False, phases=("broker down",))
    (phase,) = figures["phases"]
    assert phase["batches_written"] >= 5 * 2  # five hosts, through the outage
    assert (phase["batches_lost"], phase["doubled"]) == (0, 0)
    assert phase["samples_written"] == phase["samples_expected"]
    assert phase["polls_taken"] >= phase["polls_due"] - 5  # five hosts, each poll rounded
    assert phase["catch_up_s"] is not None
    assert all(row["outbox_dropped"] == 0 for row in figures["collector_status"])
