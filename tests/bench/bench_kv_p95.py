"""The week's P95 of running requests that `/metrics`' KV gap reads, at fleet scale: from the
blocks of counted peaks (inventory.timeseries.running_blocks) against ranking every minute.

    python tests/bench/bench_kv_p95.py [--deployments 30000] [--full 300] [--shards 8]
                                        [--json OUT]

Needs the database of DATABASE_URL migrated; it empties the engine minute rollups and the
blocks (a bench database). Deployments are ids only: the figure reads no deployment row.

A week of minutes for 30,000 deployments is 302 M rows, more than a bench can write, so:
1. `--full` deployments get every minute of the last 8 days, written straight; every
   deployment gets the minutes of the window's two partial hours and of one whole hour;
2. the real builder builds every hour from those minutes (the hour with every deployment's
   minutes timed on its own: what beat's pass costs an hour of the fleet);
3. the other deployments' hours get histograms written straight, of the same shape: 17
   distinct whole peaks an hour, shifted from hour to hour over some 120 values a week;
4. the real builder builds the larger blocks from their halves (timed);
5. `queries.running_percentile` over the week for every deployment and for one shard of
   them, from the blocks (median of 3); the ranked path over the `--full` deployments' minutes
   (median of 3), whose rate gives what ranking every deployment would cost; both checked
   equal on those deployments.
"""

from __future__ import annotations

import argparse
import datetime as dt
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
from django.utils import timezone

from inventory.timeseries import partitions, queries, running_blocks

# Whole running requests: a deployment's level, an hour's shift, a minute's spread.
PEAK = "(({d} %% 200) + ({h} * 37 %% 101) + ({m} * 7 %% 17))::real"
_HOUR_OF_B, _MINUTE_OF_B = (
    "extract(epoch FROM b)::bigint / 3600",
    "extract(epoch FROM b)::bigint / 60",
)
MINUTES = f"""
INSERT INTO inventory_engine_rollup_1m (deployment_id, bucket, samples, running_max,
    running_sum, running_count, requests)
SELECT d, b, 6, {PEAK.format(d="d", h=_HOUR_OF_B, m=_MINUTE_OF_B)}, 1, 1, 0
FROM generate_series(%(first_id)s, %(last_id)s) d,
     generate_series(%(first)s::timestamptz, %(last)s, interval '1 minute') b
ON CONFLICT DO NOTHING
"""
HISTOGRAMS = f"""
INSERT INTO inventory_running_histogram (level, start, deployment_id, peaks, minutes)
SELECT 0, hour, d,
    ARRAY(SELECT {PEAK.format(d="d", h="extract(epoch FROM hour)::bigint / 3600", m="0")}
                 ::float8 + i FROM generate_series(0, 16) i ORDER BY i),
    '{{4,3,4,3,4,3,4,3,4,3,4,3,4,3,4,3,4}}'::integer[]
FROM generate_series(%(first_id)s, %(last_id)s) d, unnest(%(hours)s::timestamptz[]) hour
"""


def _execute(sql: str, params: dict | list | None = None) -> float:
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    return time.perf_counter() - started


def _median(call, runs: int = 3) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def _hour(moment: dt.datetime) -> dt.datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deployments", type=int, default=30_000)
    parser.add_argument("--full", type=int, default=300, help="deployments with every minute")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--json", default=str(Path(tempfile.gettempdir()) / "kv_p95.json"))
    args = parser.parse_args()
    now = timezone.now()
    week = now - dt.timedelta(days=7), now
    hour = dt.timedelta(hours=1)
    timed_hour = _hour(now) - 2 * hour
    partitions.ensure_partitions(now - running_blocks.KEEP - hour, now)
    for table in ("inventory_engine_rollup_1m", "inventory_engine_rollup_1m_pack",
                  "inventory_running_histogram", "inventory_running_block"):  # fmt: skip
        _execute(f"TRUNCATE {table}")
    figures: dict = {"deployments": args.deployments, "full": args.full, "shards": args.shards}

    written = _execute(MINUTES, {"first_id": 1, "last_id": args.full,
                                 "first": now - running_blocks.KEEP, "last": now})  # fmt: skip
    for first, last in ((week[0], _hour(week[0]) + hour), (_hour(now), now),
                        (timed_hour, timed_hour + hour - dt.timedelta(minutes=1))):  # fmt: skip
        written += _execute(MINUTES, {"first_id": args.full + 1, "last_id": args.deployments,
                                      "first": first, "last": last})  # fmt: skip
    _execute("ANALYZE inventory_engine_rollup_1m")
    figures["minutes_written_s"] = round(written, 1)

    started = time.perf_counter()
    running_blocks._build(0, running_blocks._index(timed_hour))
    figures["hour_build_every_deployment_s"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    running_blocks.build(budget_s=3600, now=now)
    figures["first_build_s"] = round(time.perf_counter() - started, 1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT start FROM inventory_running_block WHERE level = 0")
        # Not the hours every deployment has minutes of: those are built from them.
        hours = sorted(
            row[0] for row in cursor.fetchall() if row[0] not in {timed_hour, _hour(week[0])}
        )
        # The larger blocks again, once every deployment's hours are there.
        cursor.execute("DELETE FROM inventory_running_block WHERE level > 0")
        cursor.execute("DELETE FROM inventory_running_histogram WHERE level > 0")
    figures["histograms_written_s"] = round(
        _execute(HISTOGRAMS, {"first_id": args.full + 1, "last_id": args.deployments,
                              "hours": hours}), 1)  # fmt: skip
    _execute("ANALYZE inventory_running_histogram")
    started = time.perf_counter()
    figures["larger_blocks"] = running_blocks.build(budget_s=3600, now=now)
    figures["larger_blocks_build_s"] = round(time.perf_counter() - started, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), pg_total_relation_size('inventory_running_histogram') "
            "FROM inventory_running_histogram"
        )
        figures["histogram_rows"], figures["histogram_bytes"] = cursor.fetchone()

    every = list(range(1, args.deployments + 1))
    shard = every[:: args.shards]
    full = every[: args.full]
    figures["blocks_whole_s"], whole = _median(lambda: queries.running_percentile(every, *week, 95))
    figures["blocks_shard_s"], _ = _median(lambda: queries.running_percentile(shard, *week, 95))
    figures["blocks_full_s"], from_blocks = _median(
        lambda: queries.running_percentile(full, *week, 95)
    )
    ranked_path = running_blocks.running_percentile
    running_blocks.running_percentile = lambda *args: None
    try:
        figures["ranked_full_s"], ranked = _median(
            lambda: queries.running_percentile(full, *week, 95)
        )
    finally:
        running_blocks.running_percentile = ranked_path
    figures["equal_on_full"] = from_blocks == ranked and len(ranked) == args.full
    figures["answered"] = len(whole)
    per_deployment = figures["ranked_full_s"] / args.full
    figures["ranked_whole_argued_s"] = round(per_deployment * args.deployments, 1)
    figures["ranked_shard_argued_s"] = round(per_deployment * len(shard), 1)
    for name in ("blocks_whole_s", "blocks_shard_s", "blocks_full_s", "ranked_full_s"):
        figures[name] = round(figures[name], 3)
    Path(args.json).write_text(json.dumps(figures, indent=2))
    for name, value in figures.items():
        print(f"{name:32} {value}")
    return 0 if figures["equal_on_full"] and figures["answered"] == args.deployments else 1


if __name__ == "__main__":
    sys.exit(main())
