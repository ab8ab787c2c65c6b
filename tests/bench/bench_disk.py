"""Disk per host: what an hour of a full inference host's batches weighs in each table.

    python tests/bench/bench_disk.py [--hosts 50] [--hours 1] [--noise] [--json OUT]

Needs the database of DATABASE_URL migrated and empty of telemetry (make bench uses a separate
bench database). The batches are bench_ingest's: 8 cards, 4 processes a card, one batch every
10 s (AGENT_FLUSH_INTERVAL_S), written through the real ingest path, then the 1-minute and
1-hour rollups refreshed. Each table's size is its partitions' heap, indexes and TOAST
(pg_total_relation_size) after VACUUM, so the figures are what retention multiplies: first as
rows, then packed (inventory.timeseries.packing: the hour is closed, so the packer takes it all),
in the same run. `--noise` moves every memory figure by up to 256 MiB each interval (the
allocator of a busy host) instead of bench_ingest's steady figures: what compresses worst.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django

django.setup()

from django.db import connection

from inventory.timeseries import packing, partitions, rollups
from tests.bench.bench_ingest import build_fleet, ingest_path, wire_batches

FLUSH_S = 10


def table_sizes() -> dict[str, dict[str, int]]:
    sizes = {}
    with connection.cursor() as cursor:
        for table in partitions.TABLES:
            names = [name for name, _ in partitions.existing_partitions(table)]
            total = rows = 0
            for name in names:
                cursor.execute(f"VACUUM ANALYZE {name}")
                cursor.execute("SELECT pg_total_relation_size(%s)", [name])
                total += cursor.fetchone()[0]
                cursor.execute(f"SELECT count(*) FROM {name}")
                rows += cursor.fetchone()[0]
            sizes[table.name] = {"bytes": total, "rows": rows, "partitions": len(names)}
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--noise", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    before = table_sizes()
    if any(size["rows"] for size in before.values()):
        raise SystemExit("the bench database already holds telemetry: use an empty one")
    fleet = build_fleet(args.hosts)
    intervals = int(args.hours * 3600 / FLUSH_S)
    # Whole minutes and hours, ending a little in the past (ingest refuses the future).
    start = (time.time() // 3600) * 3600 - 3 * 3600
    wire = wire_batches(fleet, intervals, start, random.Random(31) if args.noise else None)
    ingest_path(wire, group=500)
    rollups.refresh_all()
    as_rows = table_sizes()
    started = time.perf_counter()
    steps = packing.pack_all()
    pack_s = time.perf_counter() - started
    packed = table_sizes()
    host_days = args.hosts * args.hours / 24
    figures = {
        "hosts": args.hosts,
        "hours": args.hours,
        "noise": args.noise,
        "flush_interval_s": FLUSH_S,
        "batches": len(wire),
        "pack_s": round(pack_s, 2),
        "pack_steps": len(steps),
        "tables": {
            name: {
                **size,
                "bytes_per_row": round(size["bytes"] / size["rows"], 1) if size["rows"] else None,
                # The pack twin; the rows left after packing (none: the hour is closed) say so.
                "packed_bytes": packed.get(f"{name}_pack", {}).get("bytes", 0),
                "rows_left": packed[name]["rows"],
            }
            for name, size in as_rows.items()
            if not name.endswith("_pack")
        },
    }
    for kind, tables in (("raw", packing.RAW_TABLES), ("minute", packing.MINUTE_TABLES)):
        for state, key in (("rows", "bytes"), ("packed", "packed_bytes")):
            total = sum(figures["tables"][table.table][key] for table in tables)
            figures[f"{kind}_{state}_bytes_per_host_day"] = round(total / host_days)
        # The rows of the newest hours are kept as rows until packed: about two hours' worth
        # (the open hour, and the last one until 15 minutes past), whatever the retention.
        rows = sum(figures["tables"][table.table]["bytes"] for table in tables)
        figures[f"{kind}_rows_working_set_bytes_per_host"] = round(
            rows / args.hosts / args.hours * 2
        )
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
