"""One beat pass of collection plans at fleet scale: plans sent and the pass's wall time.

    python tests/bench/bench_plans.py [--hosts 10000] [--json OUT]

Needs the database of DATABASE_URL migrated (make bench uses a separate bench database) and
the broker of CELERY_BROKER_URL (the plans sent go to it; their queues are purged after).

The hosts are made with bulk_create, none with a plan sent yet. Then:
1. the first pass: every host's plan sent (a fresh install, or beat after a wipe of its
   deliveries), each noted in PlanDelivery; then the plans are taken off the queues, as the
   agents would;
2. passes over the unchanged fleet (plans sent: 0 expected);
3. a pass after one host's plan changed (a deployment added: 1 expected);
4. the old behaviour's count for comparison: one plan a collected host a pass (the per-host
   beat entries), counted, not run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django

django.setup()

from django.db import connection
from django.test.utils import CaptureQueriesContext

from console.celery import app
from inventory.collection import agent_queue, hosts_with_plans
from inventory.models import Deployment, Host
from inventory.tasks import send_collection_plans

PREFIX = "plan-bench-"


def remove_fleet() -> None:
    Deployment.objects.filter(host__name__startswith=PREFIX).delete()
    Host.objects.filter(name__startswith=PREFIX).delete()


def build_fleet(count: int) -> list[Host]:
    remove_fleet()
    Host.objects.bulk_create(
        [
            Host(
                name=f"{PREFIX}{i:05d}",
                address=f"{PREFIX}{i:05d}.internal",
                collector=Host.Collector.NVML,
            )
            for i in range(count)
        ],
        batch_size=2000,
    )
    return list(hosts_with_plans().filter(name__startswith=PREFIX))


def take_plans(hosts: list[Host]) -> None:
    with app.connection_for_write() as conn:
        channel = conn.channel()
        for host in hosts:
            channel.queue_purge(agent_queue(host))


def timed_pass() -> tuple[dict, float, int]:
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        sent = send_collection_plans()
        wall = time.perf_counter() - started
    return sent, wall, len(queries)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=3, help="unchanged passes, median taken")
    parser.add_argument("--json", default=str(Path(tempfile.gettempdir()) / "plans.json"))
    args = parser.parse_args()
    from tests.factories import DeploymentFactory

    started = time.perf_counter()
    hosts = build_fleet(args.hosts)
    setup_s = time.perf_counter() - started
    try:
        first = timed_pass()
        take_plans(hosts)  # the agents took their plans
        unchanged = [timed_pass() for _ in range(args.passes)]
        DeploymentFactory(host=hosts[len(hosts) // 2])
        one_changed = timed_pass()
    finally:
        take_plans(hosts)
        remove_fleet()
    sent_unchanged = [sum(v for k, v in sent.items() if k != "held") for sent, _, _ in unchanged]
    figures = {
        "hosts": len(hosts),
        "setup_s": round(setup_s, 2),
        "first_plans_sent": sum(v for k, v in first[0].items() if k != "held"),
        "first_pass_s": round(first[1], 3),
        "first_pass_queries": first[2],
        "unchanged_plans_sent": max(sent_unchanged),
        "unchanged_pass_s": round(statistics.median(wall for _, wall, _ in unchanged), 3),
        "unchanged_pass_queries": unchanged[-1][2],
        "one_changed_plans_sent": one_changed[0]["changed"] + one_changed[0]["refreshed"],
        "one_changed_pass_s": round(one_changed[1], 3),
        "one_changed_pass_queries": one_changed[2],
        # The per-host beat entries: one plan every collected host every pass.
        "old_plans_a_pass": len(hosts),
    }
    print(json.dumps(figures, indent=2))
    Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
