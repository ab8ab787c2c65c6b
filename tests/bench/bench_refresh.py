"""The rollup refresh's time a cycle with a big fleet, against its interval.

    python tests/bench/bench_refresh.py [--minute 58] [--cycles 3] [--reuse [--hours-back N]]
                                        [--json OUT]

Needs the database of DATABASE_URL migrated and a fleet in it (bench_alerts.py --hosts 10000
leaves one: 10,000 hosts x 8 cards, three deployments a host). Every card gets 4 processes.

An hour two hours back is filled as ingest and the refreshes before would have left it at
`--minute` (late in the hour was the worst case while a refresh recomputed the whole hour's
hourly rollups and packs from its minutes): minute rollups of every card, process and
deployment for minutes 0 to minute - 1, the hour's hourly rollups and packs made from them
(untimed, as a refresh of each minute would have left them), raw samples every 10 s (the
agents' flush) for the minutes `minute` and `minute + 1`. Then:

1. a refresh with those two minutes dirty (a cycle after a late or slow one);
2. `--cycles` refreshes with one minute dirty (the steady state: each cycle, the minute the
   flushes of the last interval touched, dirtied again), its raw samples in place;
3. a late batch: one host's samples (its cards, processes and engines) land in the minute
   before, 5 s into it, as an agent's backlog after a cut would, and that minute, marked
   dirty for that host as ingest marks it, is refreshed again alone (that host's rows are
   recomputed and fold into their hour; only that host's packs are made again);
4. another host's late batch in the same minute, refreshed with the minute being filled (a
   cycle in which a backlog arrives).

Each is timed against ROLLUP_REFRESH_INTERVAL_S (the beat interval of
inventory.refresh_rollups). What the hour held before is replaced; --reuse times the hour an
earlier run filled again (--hours-back: that run's hour, when the clock has moved on since).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
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
from django.db import connection
from django.utils import timezone

from inventory.models import Gpu, Host
from inventory.timeseries import partitions, rollups

PROCESSES = 4
USED = "(10 + 5 * sin(extract(epoch FROM b) / 600 + g.id + p) + random()) * 1073741824"
# Each card's processes, in its first deployment.
PROCS = f"""LEFT JOIN (SELECT gpu_id, min(deployment_id) AS id FROM inventory_deployment_gpus
               GROUP BY gpu_id) dg ON dg.gpu_id = g.id
    CROSS JOIN generate_series(0, {PROCESSES - 1}) p"""


def sql(statement: str, params: list) -> float:
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
    return time.perf_counter() - started


def fill(hour: dt.datetime, minute: int) -> dict[str, float]:
    partitions.ensure_partitions(hour - dt.timedelta(hours=1), hour + dt.timedelta(hours=2))
    done = hour + dt.timedelta(minutes=minute)  # minutes before this are rolled up already
    raw_end = done + dt.timedelta(minutes=2)
    steps = {
        "card minute rollups": f"""
            INSERT INTO inventory_card_rollup_1m (gpu_id, bucket, samples, lost, total_bytes,
                used_max, used_sum, used_count, reserved_max, free_min, util_gpu_max,
                util_gpu_sum, util_gpu_count, frag_index_max)
            SELECT g.id, b, 6, false, g.memory_total_bytes, (4 * {USED})::bigint,
                   4 * {USED} * 6, 6, 502267904, 1073741824, 90, 540, 6, random() * 0.6
            FROM inventory_gpu g CROSS JOIN (SELECT 0 AS p) p0
            CROSS JOIN generate_series(%s, %s, interval '1 minute') b ORDER BY b, g.id""",
        "process minute rollups": f"""
            INSERT INTO inventory_process_rollup_1m (gpu_id, pid, bucket, deployment_id, name,
                samples, used_max, used_sum, used_count, frag_index_max)
            SELECT g.id, 4000 + p, b, dg.id, 'python3', 6, ({USED})::bigint,
                   {USED} * 6, 6, random() * 0.6
            FROM inventory_gpu g {PROCS}
            CROSS JOIN generate_series(%s, %s, interval '1 minute') b ORDER BY b, g.id""",
        "engine minute rollups": """
            INSERT INTO inventory_engine_rollup_1m (deployment_id, bucket, samples, running_max,
                running_sum, running_count, waiting_max, kv_usage_max, requests, requests_s,
                latency_p50_max, latency_p95_max, latency_p99_max)
            SELECT d.id, b, 6, 60, 300, 6, 5, 0.6, 600, 60, 0.2, 0.4, 0.5
            FROM inventory_deployment d
            CROSS JOIN generate_series(%s, %s, interval '1 minute') b ORDER BY b, d.id""",
    }
    last_rolled = done - dt.timedelta(minutes=1)
    for kind in ("card", "process", "engine"):
        for table in (f"inventory_{kind}_rollup_1m", f"inventory_{kind}_sample"):
            column = "bucket" if "rollup" in table else "ts"
            sql(f"DELETE FROM {table} WHERE {column} >= %s AND {column} < %s",
                [hour, hour + dt.timedelta(hours=1)])  # fmt: skip
    timings = {}
    if minute > 0:
        for label, statement in steps.items():
            timings[label] = sql(statement, [hour, last_rolled])
    timings.update(raw_samples(done, raw_end - dt.timedelta(seconds=10)))
    started = time.perf_counter()
    rollups.rebuild_hours(hour, hour)
    timings["hour rollups and packs"] = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {label: round(seconds, 1) for label, seconds in timings.items()}


def raw_samples(first: dt.datetime, last: dt.datetime, host: int | None = None) -> dict:
    """Raw samples every 10 s from `first` to `last`, of every host's cards, processes and
    engines or of `host`'s alone."""
    timings = {}
    timings["raw card samples"] = sql(
        f"""INSERT INTO inventory_card_sample
            SELECT g.id, b, gen_random_uuid(), 10, 10, false, g.memory_total_bytes,
                   (4 * {USED})::bigint, (4 * {USED})::bigint, 502267904, 1073741824,
                   1073741824, 95, 90, 60, random() * 0.4
            FROM inventory_gpu g CROSS JOIN (SELECT 0 AS p) p0
            CROSS JOIN generate_series(%s, %s, interval '10 seconds') b
            WHERE %s::bigint IS NULL OR g.host_id = %s ORDER BY b, g.id""",
        [first, last, host, host],
    )
    timings["raw process samples"] = sql(
        f"""INSERT INTO inventory_process_sample
            SELECT g.id, b, gen_random_uuid(), 4000 + p, 'compute', 'python3', dg.id,
                   NULL, ({USED})::bigint, ({USED})::bigint, 10, ({USED})::bigint,
                   ({USED})::bigint - 1073741824, 536870912, 268435456, random() * 0.6
            FROM inventory_gpu g {PROCS}
            CROSS JOIN generate_series(%s, %s, interval '10 seconds') b
            WHERE %s::bigint IS NULL OR g.host_id = %s ORDER BY b, g.id""",
        [first, last, host, host],
    )
    timings["raw engine samples"] = sql(
        """INSERT INTO inventory_engine_sample
            SELECT d.id, b, gen_random_uuid(), 0.6, 0.6, 60, 60, 0, 0, NULL, 100, 0.2, 0.4, 0.5
            FROM inventory_deployment d
            CROSS JOIN generate_series(%s, %s, interval '10 seconds') b
            WHERE %s::bigint IS NULL OR d.host_id = %s ORDER BY b, d.id""",
        [first, last, host, host],
    )
    return timings


def dirty(*minutes: dt.datetime, hosts: dict[dt.datetime, int] | None = None) -> None:
    """The minutes marked dirty, as ingest leaves them: for every host (the whole fleet's
    flushes), or for the one host of `hosts` whose late batch wrote there."""
    hosts = hosts or {}
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM inventory_rollup_dirty")
        cursor.execute(
            "INSERT INTO inventory_rollup_dirty (bucket, host_id) "
            "SELECT * FROM unnest(%s::timestamptz[], %s::bigint[])",
            [list(minutes), [hosts.get(minute, rollups.EVERY_HOST) for minute in minutes]],
        )


def timed_refresh() -> tuple[float, int]:
    started = time.perf_counter()
    refreshed = rollups.refresh()
    return time.perf_counter() - started, refreshed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minute", type=int, default=58, help="0-58: where in the hour")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="the hour is filled already")
    parser.add_argument("--hours-back", type=int, default=2, help="the hour filled, before now's")
    parser.add_argument("--json")
    args = parser.parse_args()
    hour = timezone.now().astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    hour -= dt.timedelta(hours=args.hours_back)
    cards = Gpu.objects.count()
    print(f"{cards} cards x {PROCESSES} processes, hour {hour:%H:%M}, minute {args.minute}")
    generation = {} if args.reuse else fill(hour, args.minute)
    print(json.dumps(generation), flush=True)
    first = hour + dt.timedelta(minutes=args.minute)
    second = first + dt.timedelta(minutes=1)
    dirty(first, second)
    two_s, refreshed = timed_refresh()
    assert refreshed == 2, refreshed
    steady = []
    for _ in range(args.cycles):
        dirty(second)
        seconds, refreshed = timed_refresh()
        assert refreshed == 1, refreshed
        steady.append(seconds)
    late_by = dt.timedelta(seconds=5)
    hosts = list(Host.objects.order_by("pk").values_list("pk", flat=True)[:2])
    raw_samples(first + late_by, first + late_by, host=hosts[0])
    dirty(first, hosts={first: hosts[0]})
    late_s, refreshed = timed_refresh()
    assert refreshed == 1, refreshed
    raw_samples(first + 3 * late_by, first + 3 * late_by, host=hosts[-1])
    dirty(first, second, hosts={first: hosts[-1]})
    late_and_filling_s, refreshed = timed_refresh()
    assert refreshed == 2, refreshed
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM inventory_process_rollup_1m WHERE bucket >= %s AND bucket < %s",
            [hour, hour + dt.timedelta(hours=1)],
        )
        process_minutes = cursor.fetchone()[0]
    figures = {
        "cards": cards,
        "processes": cards * PROCESSES,
        "minute_of_hour": args.minute,
        "process_minute_rollups_in_the_hour": process_minutes,
        "generation_s": generation,
        "two_dirty_minutes_s": round(two_s, 2),
        "one_dirty_minute_s": [round(s, 2) for s in steady],
        "one_dirty_minute_median_s": round(statistics.median(steady), 2),
        "late_minute_s": round(late_s, 2),
        "late_and_filling_s": round(late_and_filling_s, 2),
        "interval_s": settings.CELERY_BEAT_SCHEDULE["refresh-rollups"]["schedule"],
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
