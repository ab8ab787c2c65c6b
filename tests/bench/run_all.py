"""make bench: run every benchmark on a bench database and write docs/benchmarks.md.

    python -m tests.bench.run_all [--only ingest,pages] [--broker URL]... [--outage S]
    (make bench runs them all but the fault campaign, through the broker of CELERY_BROKER_URL
    where set; make faults runs the campaign alone, `--only faults`)

The figures are kept in docs/benchmarks.json too, so re-running one benchmark rewrites its
section and leaves the others as they were measured.

The bench database sits on the same server as the console's (DATABASE_URL, or the embedded
one) under the name <database>_bench, created afresh for each benchmark, so figures never mix
with the console's data and every benchmark starts from the same empty tables. The fault
campaign (tests/bench/faults.py) brings a PostgreSQL and a broker of its own, since it stops
and crashes them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

BASE_DIR = Path(__file__).resolve().parents[2]
DOC = BASE_DIR / "docs" / "benchmarks.md"
FIGURES = BASE_DIR / "docs" / "benchmarks.json"
BENCHES = {
    "ingest": ["tests/bench/bench_ingest.py"],
    "collector": ["tests/bench/bench_collector.py"],
    "pages": ["tests/bench/bench_pages.py"],
    "placement": ["tests/bench/bench_placement.py", "--limit", "10"],
    "faults": ["tests/bench/faults.py"],
    "disk": ["tests/bench/bench_disk.py"],
    "disk_noise": ["tests/bench/bench_disk.py", "--noise"],
    "partition": ["tests/bench/bench_partition.py"],
    "alerts": ["tests/bench/bench_alerts.py"],
    "loadtest": ["tests/bench/bench_loadtest.py"],
}
BENCHES["operations"] = ["tests/bench/bench_operations.py"]
BENCHES["plans"] = ["tests/bench/bench_plans.py"]
# Half an hour of outages: only when asked for by name.
ON_REQUEST = {"faults", "partition"}
# The benchmarks that start servers of their own and need no bench database.
OWN_SERVERS = {"faults", "partition", "loadtest"}


def bench_database(url: str) -> str:
    parts = urlsplit(url)
    name = parts.path.lstrip("/") or "postgres"
    bench = f"{name}_bench"
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{bench}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{bench}"')
    return urlunsplit(parts._replace(path=f"/{bench}"))


def run(argv: list[str], env: dict) -> None:
    print("$", " ".join(argv), flush=True)
    subprocess.run([sys.executable, *argv], cwd=BASE_DIR, env=env, check=True)


def machine() -> str:
    cpu = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        kib = int(meminfo.read_text().split()[1])
        memory = f", {kib / 1024**2:.0f} GiB RAM"
    return f"{os.cpu_count()} cores ({cpu}){memory}, Python {platform.python_version()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        default=",".join(name for name in BENCHES if name not in ON_REQUEST),
        help=f"e.g. ingest,pages (default: all but {', '.join(sorted(ON_REQUEST))})",
    )
    parser.add_argument(
        "--broker", action="append", default=[], help="ingest through this broker too"
    )
    parser.add_argument(
        "--outage", type=float, default=300.0, help="seconds of each fault campaign outage"
    )
    args = parser.parse_args()
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(names) - set(BENCHES)
    if unknown:
        parser.error(
            f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {', '.join(BENCHES)}"
        )
    out = Path(tempfile.mkdtemp(prefix="bench-"))
    figures = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    for name in names:
        # A fresh database for each: one benchmark's fleet neither collides with nor slows
        # the next one's.
        env = dict(os.environ)
        if name not in OWN_SERVERS:
            env["DATABASE_URL"] = bench_database(os.environ["DATABASE_URL"])
            run(["manage.py", "migrate", "-v", "0"], env)
        extra = {
            "ingest": [f"--broker={url}" for url in args.broker],
            "faults": [f"--outage={args.outage:g}"],
        }.get(name, [])
        run([*BENCHES[name], *extra, "--json", str(out / f"{name}.json")], env)
        # A baseline (figures from before a change, kept by hand) outlives re-runs.
        baseline = figures.get(name, {}).get("baseline")
        figures[name] = json.loads((out / f"{name}.json").read_text())
        if baseline:
            figures[name]["baseline"] = baseline
        figures[name]["measured_on"] = dt.date.today().isoformat()
        figures[name]["machine"] = machine()
        FIGURES.write_text(json.dumps(figures, indent=2) + "\n")
        DOC.write_text(render(figures))
        print(f"wrote {DOC.relative_to(BASE_DIR)}")
    return 0


def render(figures: dict) -> str:
    from tests.bench.report import benchmarks_markdown

    return benchmarks_markdown(figures)


if __name__ == "__main__":
    sys.exit(main())
