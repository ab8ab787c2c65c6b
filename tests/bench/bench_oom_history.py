"""The OOM history page with a big fleet: every host listed against the busiest, in one run.

    python tests/bench/bench_oom_history.py [--hosts 10000] [--ooms 30000] [--rounds 5]

Needs the database of DATABASE_URL migrated and without hosts: it registers `--hosts` hosts
and `--ooms` OOM events spread over the last 30 days (bench_pages' OOM rows), then times
`/oom/` as a manager sees it (Django's test client, server time), alternating the page as it
was (`TABLE_ROWS` beyond the fleet: a row for every host with an OOM) and as it is (the
busiest `TABLE_ROWS`, the others summed in a last row). Medians of `--rounds`, and bytes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django

django.setup()

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client

from inventory.models import Host
from inventory.views import oom


def fleet_with_ooms(hosts: int, ooms: int) -> None:
    Host.objects.bulk_create(
        [Host(name=f"bench-{h:05d}", collector="none") for h in range(hosts)], batch_size=2000
    )
    ids = list(Host.objects.values_list("id", flat=True))
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO inventory_event (host_id, kind, at, detail, snapshot, cause,
                cause_explanation, cause_reason, batch_id, position)
            SELECT (%s::bigint[])[1 + floor(random() * %s)::int], 'oom',
                   now() - random() * interval '30 days', '{}', '{}', 'true_peak',
                   'needed 2.0 GiB; card free 0.4 GiB: true peak', '{}', gen_random_uuid(), 0
            FROM generate_series(1, %s)""",
            [ids, len(ids), ooms],
        )
        cursor.execute("ANALYZE")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--ooms", type=int, default=30000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if Host.objects.exists():
        raise SystemExit("the bench database already holds hosts: use an empty one")
    fleet_with_ooms(args.hosts, args.ooms)
    settings.ALLOWED_HOSTS = ["testserver"]
    user, _ = get_user_model().objects.get_or_create(username="bench-manager")
    user.groups.add(Group.objects.get(name="manager"))
    client = Client()
    client.force_login(user)
    shown = oom.TABLE_ROWS
    ways = {"every host listed": args.hosts + 1, f"the busiest {shown}": shown}
    times: dict[str, list[float]] = {label: [] for label in ways}
    sizes = {}
    client.get("/oom/")  # the first request pays for imports and caches
    for _ in range(args.rounds):
        for label, rows in ways.items():
            oom.TABLE_ROWS = rows
            started = time.perf_counter()
            response = client.get("/oom/")
            times[label].append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise SystemExit(f"/oom/ answered {response.status_code}")
            sizes[label] = len(response.content)
    oom.TABLE_ROWS = shown
    for label, spent in times.items():
        rounds = ", ".join(f"{ms:.0f}" for ms in spent)
        print(f"{label}: {statistics.median(spent):.1f} ms ({rounds}), {sizes[label]:,} B")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
