"""Host operations against a big fleet: the off-peak planner and the degradation decision.

    python tests/bench/bench_operations.py [--hosts 1000] [--cards 200] [--json OUT]

Needs the database of DATABASE_URL migrated (make bench uses a separate bench database).
The fleet is the page benchmark's (1,000 hosts x 8 cards, tests/bench/bench_pages.py) with
30 days of hourly card rollups (a diurnal load, fragmentation drifting up on one card in
four) and the processes' newest samples. Timed:

1. the planner for the whole fleet as beat runs it every hour: the hosts' daily history
   summaries and their processes' allocator reserve read, then the pure planner per host
   (console.operations.off_peak.host_histories + decisions.defrag.plan_host); and apart, the
   once-a-day refresh of those summaries from 30 days of hourly rollups;
2. the degradation decision for one card as the alert reaches it: the card's newest samples
   and tenants read, the plan computed (console.operations.degradation.card_state + decide).
"""

from __future__ import annotations

import argparse
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

from django.utils import timezone

from console.operations import degradation, off_peak
from console.operations.decisions import defrag
from console.operations.decisions import degradation as decisions
from inventory.models import Deployment, Gpu, Host, ServedModel
from inventory.timeseries import partitions
from tests.bench.bench_pages import build_fleet, sql

PLANNER_TARGET_S = 5.0
DECISION_TARGET_MS = 50.0


def write_history(host_ids: list[int]) -> None:
    now = timezone.now()
    partitions.ensure_partitions(now - timezone.timedelta(days=31), now)
    util = "(50 + 40 * sin(extract(epoch FROM b) / 13751) + 5 * random())"
    frag = "CASE WHEN g.index %% 4 = 0 THEN least(0.9, 0.1 + extract(epoch FROM b - (now() - interval '30 days')) / 86400 * 0.02) ELSE 0.1 * random() END"  # noqa: E501
    sql(
        f"""
        INSERT INTO inventory_card_rollup_1h
        SELECT g.id, b, 360, false, g.memory_total_bytes, 60 * 1073741824::bigint,
               60 * 1073741824::numeric * 360, 360, 502267904, 20 * 1073741824::bigint,
               90, ({util} * 360)::bigint, 360, {frag}
        FROM inventory_gpu g CROSS JOIN generate_series(
            date_trunc('hour', now()) - interval '30 days', date_trunc('hour', now()),
            interval '1 hour') b
        WHERE g.host_id = ANY(%s) ORDER BY b, g.id""",
        [host_ids],
    )
    # Each card's newest minutes: at 96% of its memory, its tenant's allocator holding 2 GiB.
    sql(
        """
        INSERT INTO inventory_card_sample
        SELECT g.id, b, gen_random_uuid(), 60, 60, false, g.memory_total_bytes,
               (g.memory_total_bytes * 0.96)::bigint, (g.memory_total_bytes * 0.96)::bigint,
               502267904, (g.memory_total_bytes * 0.03)::bigint,
               (g.memory_total_bytes * 0.03)::bigint, 95, 90, 60, 0.2
        FROM inventory_gpu g CROSS JOIN generate_series(
            now() - interval '5 minutes', now(), interval '1 minute') b
        WHERE g.host_id = ANY(%s) ORDER BY b, g.id""",
        [host_ids],
    )
    sql(
        """
        INSERT INTO inventory_process_sample
        SELECT g.id, b, gen_random_uuid(), 4000 + g.index, 'compute', 'python3',
               dg.deployment_id, NULL, (g.memory_total_bytes * 0.48)::bigint,
               (g.memory_total_bytes * 0.48)::bigint, 60, 40 * 1073741824::bigint,
               38 * 1073741824::bigint, 1073741824, 536870912, 0.6
        FROM inventory_gpu g JOIN inventory_deployment_gpus dg ON dg.gpu_id = g.id
        CROSS JOIN generate_series(now() - interval '5 minutes', now(), interval '1 minute') b
        WHERE g.host_id = ANY(%s) ORDER BY b, g.id""",
        [host_ids],
    )
    sql("ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--cards", type=int, default=200, help="cards whose decision is timed")
    parser.add_argument("--json")
    args = parser.parse_args()
    started = time.perf_counter()
    hosts = build_fleet(args.hosts)
    Deployment.objects.filter(host__in=hosts).update(runtime_name="bench")
    # On-demand tenants: their 96% is memory in use, which the degradation decision acts on
    # (preallocated pools at 96% would be no alarm, inventory.analytics.memory_pressure).
    ServedModel.objects.filter(deployments__host__in=hosts).update(engine="ollama")
    write_history([h.pk for h in hosts])
    print(f"fleet and history written in {time.perf_counter() - started:.1f} s", flush=True)

    now = timezone.now()
    fleet = list(Host.objects.filter(pk__in=[h.pk for h in hosts]).prefetch_related("gpus"))
    started = time.perf_counter()
    off_peak.refresh_summaries(fleet, now)
    refresh_s = time.perf_counter() - started
    started = time.perf_counter()
    fleet = list(Host.objects.filter(pk__in=[h.pk for h in hosts]).prefetch_related("gpus"))
    histories = off_peak.host_histories(fleet, now)
    read_s = time.perf_counter() - started
    plans = [
        defrag.plan_host(history, now.timestamp(), off_peak.thresholds()) for history in histories
    ]
    planner_s = time.perf_counter() - started
    reloads = sum(len(plan.reloads) for plan in plans)
    days = max(len(c.fragmentation_daily_peaks) for h in histories for c in h.cards)

    gpus = list(Gpu.objects.filter(host__in=hosts).select_related("host")[: args.cards])
    timings = []
    for gpu in gpus:
        began = time.perf_counter()
        card = degradation.card_state(gpu)
        plan = decisions.decide(card, degradation.policy_of(None))
        timings.append((time.perf_counter() - began) * 1000)
        assert plan.over_limit and plan.steps, "every bench card is at 96%"
    timings.sort()
    figures = {
        "hosts": len(histories),
        "cards": sum(len(h.cards) for h in histories),
        "days": days,
        "hour_of_week_slots": sum(sum(v is not None for v in h.weekly_load) for h in histories),
        "planner_s": round(planner_s, 3),
        "planner_read_s": round(read_s, 3),
        "summary_refresh_s": round(refresh_s, 3),
        "planner_target_s": PLANNER_TARGET_S,
        "reloads_planned": reloads,
        "decision_cards": len(timings),
        "decision_p50_ms": round(statistics.median(timings), 2),
        "decision_p99_ms": round(timings[int(0.99 * (len(timings) - 1))], 2),
        "decision_target_ms": DECISION_TARGET_MS,
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
