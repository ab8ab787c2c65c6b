"""Alert evaluation with a big fleet, and crossing-to-notification latency end to end.

    python tests/bench/bench_alerts.py [--hosts 1000] [--cycles 5] [--json OUT]

Needs the database of DATABASE_URL migrated (make bench uses a separate bench database).

1. Cycle time: 1,000 hosts x 8 cards with the default rules, on raw samples of the last five
   minutes, the hourly rollups behind headroom, engine samples and rollups, collector
   statuses and recent events; a fleet in trouble in places: 1% of the cards above 95%, 1% red
   by fragmentation, 1% of the deployments under-reserved, 2% over their P99 SLO. The median
   of steady-state cycles (after the first, which opens the pending alerts), and the query
   count of a cycle at a tenth of the fleet and at the whole of it.
2. Latency: a real Celery worker and beat (evaluation every ALERT_EVALUATION_INTERVAL_S) and a
   webhook receiver; one card crosses 95% (the default rule, `for` 30 s) through the real
   ingest path; the time from the first sample over the line to the webhook's arrival,
   against `for` + one cycle + 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django

django.setup()

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.alerts.evaluator import run_cycle
from console.alerts.models import Alert, AlertRule
from inventory.models import Deployment, Gpu, Host, ServedModel
from inventory.timeseries import partitions

GIB = 1024**3
CARDS = 8
GROUPS = ((0, 1, 2), (3, 4, 5), (6, 7))
LATENCY_INTERVAL_S = 5.0


def build_fleet(first: int, count: int) -> list[int]:
    models = [
        ServedModel.objects.get_or_create(
            name=f"alert-bench-model-{i}",
            defaults={"weights_bytes": 40 * GIB, "num_layers": 80, "num_kv_heads": 8,
                      "head_dim": 128, "kv_dtype": "bf16", "p99_latency_slo_ms": 800},
        )[0]
        for i in range(len(GROUPS))
    ]  # fmt: skip
    hosts = Host.objects.bulk_create(
        [Host(name=f"alert-bench-{i:04d}", collector=Host.Collector.SIMULATED,
              labels={"rack": f"r{i % 40}"}) for i in range(first, first + count)]
    )  # fmt: skip
    gpus = Gpu.objects.bulk_create(
        [Gpu(host=host, index=index, uuid=f"GPU-alert-bench-{host.name}-{index}",
             product_name="NVIDIA H100 80GB HBM3", memory_total_bytes=81559 * 1024**2)
         for host in hosts for index in range(CARDS)]
    )  # fmt: skip
    by_host: dict[int, list[Gpu]] = {}
    for gpu in gpus:
        by_host.setdefault(gpu.host_id, []).append(gpu)
    deployments = Deployment.objects.bulk_create(
        [Deployment(host=host, served_model=models[n], isolation_mode="gpu_group",
                    kv_reservation_bytes=20 * GIB, kv_reservation_basis="p95",
                    kv_tokens_per_request=2000, admission_policy="queue")
         for host in hosts for n in range(len(GROUPS))]
    )  # fmt: skip
    through = Deployment.gpus.through
    through.objects.bulk_create(
        [through(deployment_id=d.pk, gpu_id=by_host[d.host_id][index].pk)
         for n, d in enumerate(deployments) for index in GROUPS[n % len(GROUPS)]]
    )  # fmt: skip
    ids = [host.pk for host in hosts]
    write_telemetry(ids)
    return ids


def sql(statement: str, params: list) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def write_telemetry(ids: list[int]) -> None:
    now = timezone.now()
    partitions.ensure_partitions(now - timezone.timedelta(days=8), now)
    # ~45-75 GiB of 80 used; every 100th card at 97%.
    used = """CASE WHEN g.id %% 100 = 0 THEN g.memory_total_bytes * 0.97
              ELSE (60 + 12 * sin(extract(epoch FROM b) / 13751 + g.id) + 3 * random())
                   * 1073741824 END"""
    sql(f"""
        INSERT INTO inventory_card_sample
        SELECT g.id, b, gen_random_uuid(), 10, 10, false, g.memory_total_bytes,
               ({used})::bigint, ({used})::bigint, 502267904,
               g.memory_total_bytes - 502267904 - ({used})::bigint,
               g.memory_total_bytes - 502267904 - ({used})::bigint, 95, 90, 60,
               CASE WHEN g.id %% 97 = 0 THEN 0.7 ELSE random() * 0.4 END
        FROM inventory_gpu g CROSS JOIN generate_series(
            now() - interval '5 minutes', now(), interval '10 seconds') b
        WHERE g.host_id = ANY(%s) ORDER BY b, g.id""", [ids])  # fmt: skip
    sql(f"""
        INSERT INTO inventory_card_rollup_1h
        SELECT g.id, b, 360, false, g.memory_total_bytes, ({used})::bigint,
               ({used}) * 360, 360, 502267904, g.memory_total_bytes - ({used})::bigint,
               90, 90 * 360, 360, random() * 0.6
        FROM inventory_gpu g CROSS JOIN generate_series(
            date_trunc('hour', now()) - interval '2 hours', date_trunc('hour', now()),
            interval '1 hour') b
        WHERE g.host_id = ANY(%s) ORDER BY b, g.id""", [ids])  # fmt: skip
    sql("""
        INSERT INTO inventory_engine_sample
        SELECT d.id, b, gen_random_uuid(), 0.6, 0.6, 60, 60, 0, 0, NULL, 100, 0.2, 0.4,
               CASE WHEN d.id %% 50 = 0 THEN 0.9 ELSE 0.5 END
        FROM inventory_deployment d CROSS JOIN generate_series(
            now() - interval '2 minutes', now(), interval '10 seconds') b
        WHERE d.host_id = ANY(%s)""", [ids])  # fmt: skip
    sql("""
        INSERT INTO inventory_engine_rollup_1m
        SELECT d.id, b, 6, CASE WHEN d.id %% 100 = 0 THEN 60 ELSE 6 + 4 * random() END, 300,
               6, 5, 0.6, 600, 0.4 + 0.2 * random(), 0.5 + 0.4 * random()
        FROM inventory_deployment d CROSS JOIN generate_series(
            date_trunc('minute', now()) - interval '1 hour', date_trunc('minute', now()),
            interval '1 minute') b
        WHERE d.host_id = ANY(%s)""", [ids])  # fmt: skip
    sql("""
        INSERT INTO inventory_collectorstatus (host_id, last_seq, last_sample_at,
            last_batch_at, batches, missing_batches, faults_last_batch, faults_total,
            outbox_depth, outbox_dropped, events_dropped, mps_servers, sequences)
        SELECT id, 100, now(), now(), 100, 0, 0, 0, 0, 0, 0, '[]', '{}'
        FROM inventory_host WHERE id = ANY(%s)""", [ids])  # fmt: skip
    sql("""
        INSERT INTO inventory_event (host_id, kind, at, detail, snapshot, cause,
            cause_explanation, cause_reason, batch_id, position)
        SELECT (%s::bigint[])[1 + floor(random() * %s)::int],
               (ARRAY['oom', 'xid', 'mps_server_down', 'process_restart'])[1 + n %% 4],
               now() - random() * interval '10 minutes', '{}', '{}', '', '', '{}',
               gen_random_uuid(), 0
        FROM generate_series(1, %s) n""", [ids, len(ids), max(1, len(ids) // 10)])  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def cycle_figures(hosts: int, cycles: int) -> dict:
    tenth = max(1, hosts // 10)
    build_fleet(0, tenth)
    Alert.objects.all().delete()
    with CaptureQueriesContext(connection) as small:
        run_cycle(timezone.now())
    build_fleet(tenth, hosts - tenth)
    Alert.objects.all().delete()
    with CaptureQueriesContext(connection) as whole:
        first_started = time.perf_counter()
        run_cycle(timezone.now())
        first = time.perf_counter() - first_started
    times, cpu = [], []
    for _ in range(cycles):
        started, started_cpu = time.perf_counter(), time.process_time()
        run_cycle(timezone.now())
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return {
        "hosts": hosts,
        "cards": hosts * CARDS,
        "rules": AlertRule.objects.filter(enabled=True).count(),
        "first_cycle_s": first,
        "median_cycle_s": statistics.median(times),
        "max_cycle_s": max(times),
        # The evaluator's own CPU (the rest is PostgreSQL, and waiting on a shared machine).
        "median_cycle_cpu_s": statistics.median(cpu),
        "load_average": os.getloadavg()[0],
        "open_alerts": Alert.objects.open().count(),
        "queries_tenth_fleet": len(small),
        "queries_whole_fleet": len(whole),
    }


def latency_figures() -> dict:
    from tests.console.alerts.receivers import Receiver
    from tests.console.alerts.support import Feeder
    from tests.processes import Processes

    rule = AlertRule.objects.get(slug="card-memory-95")
    AlertRule.objects.exclude(pk=rule.pk).update(enabled=False)
    Alert.objects.all().delete()  # the fleet's: their resolutions would reach the webhook too
    host = Host.objects.create(name="alert-bench-latency", collector=Host.Collector.SIMULATED)
    gpu = Gpu.objects.create(host=host, index=0, uuid=f"GPU-{uuid.uuid4()}",
                             product_name="NVIDIA H100 80GB HBM3",
                             memory_total_bytes=81559 * 1024**2)  # fmt: skip
    receiver = Receiver()
    log_dir = Path(tempfile.mkdtemp(prefix="alert-bench-"))
    processes = Processes(
        {"DATABASE_URL": os.environ["DATABASE_URL"], "ALERT_WEBHOOK_URL": receiver.url,
         "ALERT_EVALUATION_INTERVAL_S": str(LATENCY_INTERVAL_S)}, log_dir,
    )  # fmt: skip
    processes.celery_worker("central", "celery")
    processes.beat(log_dir)
    feeder = Feeder(host, {gpu: 0.5}).start()
    try:
        time.sleep(2 * LATENCY_INTERVAL_S + 5)  # workers up, a few cycles on a calm card
        crossed = time.time()
        feeder.set(gpu, 0.97)
        deadline = time.monotonic() + rule.for_s + 10 * LATENCY_INTERVAL_S + 60
        while not _told(receiver, host) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _told(receiver, host):
            raise SystemExit(f"no notification arrived; logs in {log_dir}")
        arrived = time.time()
    finally:
        feeder.stop()
        processes.stop()
        receiver.close()
    # The first sample over the line is the first batch after `crossed` (one a second).
    return {
        "for_s": rule.for_s,
        "interval_s": LATENCY_INTERVAL_S,
        "crossing_to_notification_s": arrived - crossed,
        "target_s": rule.for_s + LATENCY_INTERVAL_S + 5,
    }


def _told(receiver, host) -> bool:
    return any(body["group"] == host.name for body in receiver.bodies)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    figures = cycle_figures(args.hosts, args.cycles)
    print(json.dumps(figures, indent=2), flush=True)
    if not args.skip_latency:
        figures["latency"] = latency_figures()
        print(json.dumps(figures["latency"], indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
