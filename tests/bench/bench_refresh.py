"""The rollup refresh's time a cycle with a big fleet, against its interval.

    python tests/bench/bench_refresh.py [--minute 50] [--cycles 3] [--reuse [--hours-back N]]
                                        [--json OUT]

Needs the database of DATABASE_URL migrated and a fleet in it (bench_alerts.py --hosts 10000
leaves one: 10,000 hosts x 8 cards, three deployments a host). Every card gets 4 processes.

An hour two hours back is filled as ingest and the refreshes before would have left it at
`--minute`: minute rollups of every card, process and deployment for minutes 0 to
minute - 1, and the hour's hourly rollups and packs made from them (untimed, as a refresh of
each minute would have left them). Raw samples come as the agents' flushes do: every host's
batch every 10 s, one sample per card, process and engine at its end, each batch's minute
marked dirty for its host and batch as ingest marks it. Then:

1. a refresh of two minutes' flushes (`minute` and the next: a cycle after a late or slow one);
   then the cycles that catch up: each given the flushes the agents sent while the one before
   ran (one every 10 s of it), until a cycle is back below the interval (at most
   CATCH_UP_CYCLES): whether the backlog drains, and in how many cycles;
2. `--cycles` steady cycles, each in a minute of its own: its first four flushes refreshed
   (untimed), then the refresh of its last two (timed): the cycle at a minute's end, the one
   that finds the most samples in the minute being filled;
3. a late batch: one host's samples land in `minute`, 5 s into it, as an agent's backlog after
   a cut would, refreshed alone (that host's rows fold into their hour; only that host's packs
   are made again);
4. another host's late batch in `minute`, refreshed with the last two flushes of a minute being
   filled (a cycle in which a backlog arrives).

Each is timed against ROLLUP_REFRESH_INTERVAL_S (the beat interval of
inventory.refresh_rollups). What the hour held from `minute` on is replaced (and its hour rows
made again from its minutes); --reuse times the hour an earlier run filled again
(--hours-back: that run's hour, when the clock has moved on since).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
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
    """Minute rollups of every card, process and deployment for the hour's minutes before
    `minute`."""
    partitions.ensure_partitions(hour - dt.timedelta(hours=1), hour + dt.timedelta(hours=2))
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
    for kind in ("card", "process", "engine"):
        sql(f"DELETE FROM inventory_{kind}_rollup_1m WHERE bucket >= %s AND bucket < %s",
            [hour, hour + dt.timedelta(hours=1)])  # fmt: skip
    timings = {}
    if minute > 0:
        for label, statement in steps.items():
            timings[label] = sql(statement, [hour, hour + dt.timedelta(minutes=minute - 1)])
    return {label: round(seconds, 1) for label, seconds in timings.items()}


def start_at(hour: dt.datetime, minute: int) -> dict[str, float]:
    """The hour as the refreshes up to `minute` left it: no raw samples or marks, no minute
    rows from `minute` on, the hour rows and packs made from its minutes."""
    done = hour + dt.timedelta(minutes=minute)
    for kind in ("card", "process", "engine"):
        sql(f"DELETE FROM inventory_{kind}_rollup_1m WHERE bucket >= %s AND bucket < %s",
            [done, hour + dt.timedelta(hours=1)])  # fmt: skip
        sql(f"DELETE FROM inventory_{kind}_sample WHERE ts >= %s AND ts < %s",
            [hour, hour + dt.timedelta(hours=1)])  # fmt: skip
    sql("DELETE FROM inventory_rollup_dirty", [])
    started = time.perf_counter()
    rollups.rebuild_hours(hour, hour)
    timings = {"hour rollups and packs": round(time.perf_counter() - started, 1)}
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return timings


# A flush's batch id: its host's, for its moment.
BATCH = "md5({host}::text || b::text)::uuid"


def flushes(first: dt.datetime, last: dt.datetime, host: int | None = None) -> dict:
    """Every host's flushes every 10 s from `first` to `last` (or `host`'s alone): a sample of
    each card, process and engine at the flush's moment, and its minute marked dirty for its
    host and batch, as ingest writes them."""
    timings = {}
    timings["raw card samples"] = sql(
        f"""INSERT INTO inventory_card_sample
            SELECT g.id, b, {BATCH.format(host="g.host_id")}, 10, 10, false,
                   g.memory_total_bytes, (4 * {USED})::bigint, (4 * {USED})::bigint,
                   502267904, 1073741824, 1073741824, 95, 90, 60, random() * 0.4
            FROM inventory_gpu g CROSS JOIN (SELECT 0 AS p) p0
            CROSS JOIN generate_series(%s, %s, interval '10 seconds') b
            WHERE %s::bigint IS NULL OR g.host_id = %s ORDER BY b, g.id""",
        [first, last, host, host],
    )
    timings["raw process samples"] = sql(
        f"""INSERT INTO inventory_process_sample
            SELECT g.id, b, {BATCH.format(host="g.host_id")}, 4000 + p, 'compute', 'python3',
                   dg.id, NULL, ({USED})::bigint, ({USED})::bigint, 10, ({USED})::bigint,
                   ({USED})::bigint - 1073741824, 536870912, 268435456, random() * 0.6
            FROM inventory_gpu g {PROCS}
            CROSS JOIN generate_series(%s, %s, interval '10 seconds') b
            WHERE %s::bigint IS NULL OR g.host_id = %s ORDER BY b, g.id""",
        [first, last, host, host],
    )
    timings["raw engine samples"] = sql(
        f"""INSERT INTO inventory_engine_sample
            SELECT d.id, b, {BATCH.format(host="d.host_id")}, 0.6, 0.6, 60, 60, 0, 0, NULL,
                   100, 0.2, 0.4, 0.5
            FROM inventory_deployment d
            CROSS JOIN generate_series(%s, %s, interval '10 seconds') b
            WHERE %s::bigint IS NULL OR d.host_id = %s ORDER BY b, d.id""",
        [first, last, host, host],
    )
    timings["dirty marks"] = sql(
        f"""INSERT INTO inventory_rollup_dirty (bucket, host_id, batch_id)
            SELECT date_trunc('minute', b, 'UTC'), h.id, {BATCH.format(host="h.id")}
            FROM inventory_host h
            CROSS JOIN generate_series(%s, %s, interval '10 seconds') b
            WHERE %s::bigint IS NULL OR h.id = %s""",
        [first, last, host, host],
    )
    return timings


def at_its_end(minute: dt.datetime) -> None:
    """`minute` as a cycle at its end finds it: its first four flushes refreshed (untimed), its
    last two written and marked."""
    flushes(minute, minute + dt.timedelta(seconds=30))
    assert rollups.refresh() == 1
    flushes(minute + dt.timedelta(seconds=40), minute + dt.timedelta(seconds=50))


# A cycle that catches up is given the flushes sent while the one before ran; this many at most,
# in at most this many minutes of the hour (a cycle as long as the two minutes' is given six).
CATCH_UP_CYCLES = 4
CATCH_UP_MINUTES = 4


def catching_up(after: dt.datetime, seconds: float, interval_s: float) -> tuple[list, dt.datetime]:
    """The cycles after one of `seconds` whose flushes end at `after`, each given the flushes
    that came while the one before ran, until one is below `interval_s` (or CATCH_UP_MINUTES
    are filled): their times, and the moment of the last flush written."""
    cycles, last = [], after
    until = after + dt.timedelta(minutes=CATCH_UP_MINUTES)
    while seconds >= interval_s and len(cycles) < CATCH_UP_CYCLES and last < until:
        sent = min(math.ceil(seconds / 10), int((until - last).total_seconds() // 10))
        flushes(last + dt.timedelta(seconds=10), last + dt.timedelta(seconds=10 * sent))
        last += dt.timedelta(seconds=10 * sent)
        seconds, _refreshed = timed_refresh()
        cycles.append(round(seconds, 2))
    return cycles, last


def timed_refresh(statements: list | None = None) -> tuple[float, int]:
    """One refresh's time and minutes; its statements' times added to `statements`."""

    def timed(execute, sql, params, many, context):
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements.append((time.perf_counter() - began, " ".join(sql.split())[:110]))

    started = time.perf_counter()
    if statements is None:
        refreshed = rollups.refresh()
    else:
        with connection.execute_wrapper(timed):
            refreshed = rollups.refresh()
    return time.perf_counter() - started, refreshed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minute", type=int, default=50, help="where in the hour")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="the hour is filled already")
    parser.add_argument("--hours-back", type=int, default=2, help="the hour filled, before now's")
    parser.add_argument("--json")
    parser.add_argument(
        "--statements", action="store_true", help="print a steady cycle's slowest statements"
    )
    args = parser.parse_args()
    if not 0 <= args.minute <= 57 - args.cycles - CATCH_UP_MINUTES:
        parser.error("--minute and --cycles: every minute the run fills must be in the hour")
    hour = timezone.now().astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    hour -= dt.timedelta(hours=args.hours_back)
    cards = Gpu.objects.count()
    print(f"{cards} cards x {PROCESSES} processes, hour {hour:%H:%M}, minute {args.minute}")
    generation = {} if args.reuse else fill(hour, args.minute)
    generation.update(start_at(hour, args.minute))
    print(json.dumps(generation), flush=True)
    first = hour + dt.timedelta(minutes=args.minute)
    flushes(first, first + dt.timedelta(seconds=110))
    two_s, refreshed = timed_refresh()
    assert refreshed == 2, refreshed
    interval_s = settings.CELERY_BEAT_SCHEDULE["refresh-rollups"]["schedule"]
    catch_up, last = catching_up(first + dt.timedelta(seconds=110), two_s, interval_s)
    # The steady cycles from the next whole minute on, the catching up's last one closed.
    resume = last.replace(second=0) + dt.timedelta(minutes=1)
    if last < resume - dt.timedelta(seconds=10):
        flushes(last + dt.timedelta(seconds=10), resume - dt.timedelta(seconds=10))
        timed_refresh()
    skipped = (resume - first) // dt.timedelta(minutes=1)
    steady = []
    for cycle in range(args.cycles):
        minute = first + dt.timedelta(minutes=skipped + cycle)
        at_its_end(minute)
        statements = [] if args.statements else None
        seconds, refreshed = timed_refresh(statements)
        assert refreshed == 1, refreshed
        steady.append(seconds)
        for spent, statement in sorted(statements or (), reverse=True)[:12]:
            print(f"  {spent:6.2f} s  {statement}")
    late_by = dt.timedelta(seconds=5)
    hosts = list(Host.objects.order_by("pk").values_list("pk", flat=True)[:2])
    flushes(first + late_by, first + late_by, host=hosts[0])
    late_s, refreshed = timed_refresh()
    assert refreshed == 1, refreshed
    minute = first + dt.timedelta(minutes=skipped + args.cycles)
    at_its_end(minute)
    flushes(first + 3 * late_by, first + 3 * late_by, host=hosts[-1])
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
        "catching_up_s": catch_up,
        "one_dirty_minute_s": [round(s, 2) for s in steady],
        "one_dirty_minute_median_s": round(statistics.median(steady), 2),
        "late_minute_s": round(late_s, 2),
        "late_and_filling_s": round(late_and_filling_s, 2),
        "interval_s": interval_s,
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
