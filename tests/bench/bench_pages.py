"""Page server times with a big fleet: 1,000 hosts x 8 cards x 30 days of history.

    python tests/bench/bench_pages.py [--hosts 1000] [--requests 15] [--days 30]
        [--minute-hours 6] [--reuse] [--packed] [--only LABEL] [--json OUT]

Needs the database of DATABASE_URL migrated (make bench uses a separate bench database).

History is written straight into the rollup tables with generate_series, in time order as
ingest leaves them: hourly card rollups for 30 days (--days; the timed hosts always 30) and
minute rollups for the last 6 hours (--minute-hours) for every card, raw samples for the last
30 minutes, and, for the hosts whose pages are timed, process and engine rollups for the whole
window (and the hourly packs of their minutes that a rollup refresh would write). A few more
hosts are built the way co-location leaves them (SHARED_GROUPS: cards with two or three tenants
each, like the demo's infer-01 before its switch), with the timed hosts' history, so that the
co-peak analysis has shared cards to read. Then the fleet board, the host page and its JSON are
requested as a logged-in manager through Django's test client, and the median server time is
reported (the client runs the whole request: middleware, view, queries, template). So are the
board's filters and sorts, /metrics whole and in shards (?shard=K/N), the OOM history (three
OOMs a host over 30 days) and the audit trail (AUDIT_PER_HOST entries a host).
"""

from __future__ import annotations

import argparse
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
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.utils import timezone

from console.heap import settle
from inventory.models import Deployment, Gpu, Host, ServedModel
from inventory.reports import board
from inventory.reports.fleet import SORTS
from inventory.timeseries import packing, partitions, rollups

GIB = 1024**3
CARDS = 8
GROUPS = ((0, 1, 2), (3, 4, 5), (6, 7))  # three deployments a host, on card groups
TIMED_HOSTS = 20
# Time-shared deployments: two on cards 0-3, three on cards 4-5, one alone on 6-7.
SHARED_GROUPS = ((0, 1, 2, 3), (0, 1, 2, 3), (4, 5), (4, 5), (4, 5), (6, 7))
SHARED_HOSTS = 3
AUDIT_PER_HOST = 20
METRICS_SHARDS = 8
# The board's summaries are refreshed (untimed) before a board page when older than this, as
# beat's job every HOST_SUMMARY_INTERVAL_S keeps them.
BOARD_SUMMARY_EVERY_S = 20


def _cards_of(host_rows: list[Host]) -> dict[int, list[Gpu]]:
    """Eight H100s for each host, by host id."""
    gpus = Gpu.objects.bulk_create(
        [
            Gpu(
                host=host,
                index=index,
                uuid=f"GPU-bench-{host.name}-{index}",
                product_name="NVIDIA H100 80GB HBM3",
                memory_total_bytes=81559 * 1024**2,
            )
            for host in host_rows
            for index in range(CARDS)
        ]
    )
    by_host: dict[int, list[Gpu]] = {}
    for gpu in gpus:
        by_host.setdefault(gpu.host_id, []).append(gpu)
    return by_host


def build_fleet(hosts: int) -> list[Host]:
    models = [
        ServedModel.objects.get_or_create(
            name=f"bench-model-{i}",
            defaults={"weights_bytes": 40 * GIB, "num_layers": 80, "num_kv_heads": 8,
                      "head_dim": 128, "kv_dtype": "bf16", "p99_latency_slo_ms": 800},
        )[0]
        for i in range(len(GROUPS))
    ]  # fmt: skip
    host_rows = Host.objects.bulk_create(
        [
            Host(
                name=f"bench-{i:04d}", collector=Host.Collector.NONE, labels={"rack": f"r{i % 40}"}
            )
            for i in range(hosts)
        ]
    )
    by_host = _cards_of(host_rows)
    deployments = Deployment.objects.bulk_create(
        [
            Deployment(
                host=host,
                served_model=models[n],
                isolation_mode="gpu_group",
                kv_reservation_bytes=20 * GIB,
                kv_reservation_basis="p95",
                kv_tokens_per_request=2000,
                admission_policy="queue",
            )
            for host in host_rows
            for n in range(len(GROUPS))
        ]
    )
    through = Deployment.gpus.through
    through.objects.bulk_create(
        [
            through(deployment_id=d.pk, gpu_id=by_host[d.host_id][index].pk)
            for n, d in enumerate(deployments)
            for index in GROUPS[n % len(GROUPS)]
        ]
    )
    return host_rows


def build_shared_hosts(count: int) -> list[Host]:
    """Hosts whose cards are shared, each deployment on its own model so that a card's
    tenants are told apart by name as the co-peak report labels them."""
    models = [
        ServedModel.objects.get_or_create(
            name=f"bench-shared-model-{i}",
            defaults={"weights_bytes": 12 * GIB, "num_layers": 32, "num_kv_heads": 8,
                      "head_dim": 128, "kv_dtype": "bf16", "p99_latency_slo_ms": 800},
        )[0]
        for i in range(len(SHARED_GROUPS))
    ]  # fmt: skip
    host_rows = Host.objects.bulk_create(
        [Host(name=f"bench-shared-{i}", collector=Host.Collector.NONE) for i in range(count)]
    )
    by_host = _cards_of(host_rows)
    placed = [
        (
            Deployment(
                host=host,
                served_model=models[n],
                isolation_mode="time_slicing",
                kv_reservation_bytes=6 * GIB,
                kv_reservation_basis="p95",
                kv_tokens_per_request=2000,
                admission_policy="queue",
            ),
            [by_host[host.pk][index] for index in cards],
        )
        for host in host_rows
        for n, cards in enumerate(SHARED_GROUPS)
    ]
    Deployment.objects.bulk_create([deployment for deployment, _ in placed])
    through = Deployment.gpus.through
    through.objects.bulk_create(
        [through(deployment_id=d.pk, gpu_id=gpu.pk) for d, cards in placed for gpu in cards]
    )
    return host_rows


def sql(statement: str, params: list | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])


def write_history(
    hosts: list[Host], shared: list[Host], days: int = 30, minute_hours: int = 6
) -> dict[str, float]:
    now = timezone.now()
    partitions.ensure_partitions(now - timezone.timedelta(days=31), now)
    ids = [h.pk for h in hosts + shared]
    # The shared hosts get the timed hosts' whole history: their analyses are timed too.
    timed = [h.pk for h in hosts[:TIMED_HOSTS] + shared]
    # A daily curve with per-card noise: used memory between ~45 and ~75 GiB.
    used = "(60 + 12 * sin(extract(epoch FROM b) / 13751 + g.id) + 3 * random()) * 1073741824"
    # A card's tenants split it, each on its own curve (phase by deployment) and its own PID:
    # the card's share of `used` between its deployments, as on a time-shared card.
    tenant_pid = "4000 + 10 * g.index + (dg.deployment_id %% 10)"
    tenant_used = (
        "(60 + 12 * sin(extract(epoch FROM b) / 13751 + dg.deployment_id) + 3 * random())"
        " * 1073741824 / t.tenants"
    )
    tenants = """JOIN inventory_deployment_gpus dg ON dg.gpu_id = g.id
        JOIN (SELECT gpu_id, count(*) AS tenants FROM inventory_deployment_gpus GROUP BY gpu_id) t
          ON t.gpu_id = g.id"""
    timings = {}
    steps = [
        (f"card rollup 1h, {days} days every card, 30 days timed hosts", f"""
            INSERT INTO inventory_card_rollup_1h
            SELECT g.id, b, 360, false, g.memory_total_bytes, ({used})::bigint,
                   ({used}) * 360, 360, 502267904, g.memory_total_bytes - ({used})::bigint,
                   90, 90 * 360, 360, random() * 0.6
            FROM inventory_gpu g CROSS JOIN generate_series(
                date_trunc('hour', now()) - CASE WHEN g.host_id = ANY(%s) THEN interval '30 days'
                    ELSE %s * interval '1 day' END, date_trunc('hour', now()),
                interval '1 hour') b
            WHERE g.host_id = ANY(%s) ORDER BY b, g.id""", [timed, days, ids]),
        (f"card rollup 1m, {minute_hours} hours, every card", f"""
            INSERT INTO inventory_card_rollup_1m
            SELECT g.id, b, 6, false, g.memory_total_bytes, ({used})::bigint, ({used}) * 6, 6,
                   502267904, g.memory_total_bytes - ({used})::bigint, 90, 540, 6,
                   random() * 0.6
            FROM inventory_gpu g CROSS JOIN generate_series(
                date_trunc('minute', now()) - %s * interval '1 hour', date_trunc('minute', now()),
                interval '1 minute') b
            WHERE g.host_id = ANY(%s) ORDER BY b, g.id""", [minute_hours, ids]),
        ("card rollup 1m, 24 hours, timed hosts", f"""
            INSERT INTO inventory_card_rollup_1m
            SELECT g.id, b, 6, false, g.memory_total_bytes, ({used})::bigint, ({used}) * 6, 6,
                   502267904, g.memory_total_bytes - ({used})::bigint, 90, 540, 6,
                   random() * 0.6
            FROM inventory_gpu g CROSS JOIN generate_series(
                date_trunc('minute', now()) - interval '24 hours',
                date_trunc('minute', now()) - %s * interval '1 hour' - interval '1 minute',
                interval '1 minute') b
            WHERE g.host_id = ANY(%s) ORDER BY b, g.id ON CONFLICT DO NOTHING""",
         [minute_hours, timed]),
        ("raw samples, 30 minutes, every card", f"""
            INSERT INTO inventory_card_sample
            SELECT g.id, b, gen_random_uuid(), 60, 60, false, g.memory_total_bytes,
                   ({used})::bigint, ({used})::bigint, 502267904,
                   g.memory_total_bytes - 502267904 - ({used})::bigint,
                   g.memory_total_bytes - 502267904 - ({used})::bigint, 95, 90, 60, 0.2
            FROM inventory_gpu g CROSS JOIN generate_series(
                now() - interval '30 minutes', now(), interval '1 minute') b
            WHERE g.host_id = ANY(%s) ORDER BY b, g.id""", [ids]),
        ("raw process samples, 30 minutes, every card", f"""
            INSERT INTO inventory_process_sample
            SELECT g.id, b, gen_random_uuid(), {tenant_pid}, 'compute', 'python3',
                   dg.deployment_id, NULL, ({used})::bigint, ({used})::bigint, 60, ({used})::bigint,
                   ({used})::bigint - 2147483648, 1073741824, 536870912, 0.75
            FROM inventory_gpu g
            JOIN inventory_deployment_gpus dg ON dg.gpu_id = g.id
            CROSS JOIN generate_series(now() - interval '30 minutes', now(), interval '1 minute') b
            WHERE g.host_id = ANY(%s) ORDER BY b, g.id""", [ids]),
        ("process rollups 1h (30 days) and 1m (7 days), timed and shared hosts", f"""
            INSERT INTO inventory_process_rollup_1h
            SELECT g.id, {tenant_pid}, b, dg.deployment_id, 'python3', 360,
                   ({tenant_used})::bigint, ({tenant_used}) * 360, 360, random() * 0.6
            FROM inventory_gpu g {tenants}
            CROSS JOIN generate_series(date_trunc('hour', now()) - interval '30 days',
                                       date_trunc('hour', now()), interval '1 hour') b
            WHERE g.host_id = ANY(%s);
            INSERT INTO inventory_process_rollup_1m
            SELECT g.id, {tenant_pid}, b, dg.deployment_id, 'python3', 6,
                   ({tenant_used})::bigint, ({tenant_used}) * 6, 6, random() * 0.6
            FROM inventory_gpu g {tenants}
            CROSS JOIN generate_series(date_trunc('minute', now()) - interval '7 days',
                                       date_trunc('minute', now()), interval '1 minute') b
            WHERE g.host_id = ANY(%s)""", [timed, timed]),
        ("engine rollups: 2 hours every deployment, 7 days (1m) and 30 days (1h) timed", """
            INSERT INTO inventory_engine_rollup_1h
            SELECT d.id, b, 360, 60 + 40 * random(), 18000, 360, 5, 0.6, 36000,
                   0.4 + 0.2 * random(), 0.5 + 0.4 * random()
            FROM inventory_deployment d CROSS JOIN generate_series(
                date_trunc('hour', now()) - CASE WHEN d.host_id = ANY(%s)
                    THEN interval '30 days' ELSE interval '2 hours' END,
                date_trunc('hour', now()), interval '1 hour') b
            WHERE d.host_id = ANY(%s);
            INSERT INTO inventory_engine_rollup_1m
            SELECT d.id, b, 6, 60 + 40 * random(), 300, 6, 5, 0.6, 600,
                   0.4 + 0.2 * random(), 0.5 + 0.4 * random()
            FROM inventory_deployment d CROSS JOIN generate_series(
                date_trunc('minute', now()) - interval '7 days', date_trunc('minute', now()),
                interval '1 minute') b
            WHERE d.host_id = ANY(%s)""", [timed, ids, timed]),
        ("OOM events and collector status", """
            INSERT INTO inventory_event (host_id, kind, at, detail, snapshot, cause,
                cause_explanation, cause_reason, batch_id, position)
            SELECT (%s::bigint[])[1 + floor(random() * %s)::int], 'oom',
                   now() - random() * interval '30 days', '{}', '{}', 'true_peak',
                   'needed 2.0 GiB; card free 0.4 GiB: true peak', '{}', gen_random_uuid(), 0
            FROM generate_series(1, 3 * %s);
            INSERT INTO inventory_collectorstatus (host_id, last_seq, last_sample_at,
                last_batch_at, batches, missing_batches, faults_last_batch, faults_total,
                outbox_depth, outbox_dropped, events_dropped, mps_servers, sequences)
            SELECT id, 100, now(), now(), 100, 0, 0, 0, 0, 0, 0, '[]', '{}' FROM inventory_host
            WHERE id = ANY(%s)""", [ids, len(ids), len(ids), ids]),
        (f"audit trail, {AUDIT_PER_HOST} entries a host over 30 days", """
            INSERT INTO console_auditentry (at, change_id, actor_name, action, content_type_id,
                object_id, object_repr, host_id, before, after, comment)
            SELECT now() - random() * interval '30 days', gen_random_uuid(),
                   'bench-actor-' || (n %% 7),
                   (ARRAY['host.register', 'host.rotate_secret', 'host_action.request',
                          'host_action.approve'])[1 + n %% 4],
                   (SELECT id FROM django_content_type
                    WHERE app_label = 'inventory' AND model = 'host'),
                   h.id::text, h.name, h.id, '{"status": "active"}', '{"status": "draining"}', ''
            FROM inventory_host h CROSS JOIN generate_series(1, %s) n
            WHERE h.id = ANY(%s)""", [AUDIT_PER_HOST, ids]),
    ]  # fmt: skip
    for label, statement, params in steps:
        started = time.perf_counter()
        sql(statement, params)
        timings[label] = round(time.perf_counter() - started, 1)
        print(f"  {label}: {timings[label]} s", flush=True)
    # The minute rollups above were written straight, not by a refresh: pack their hours as a
    # refresh would (the analyses read the packs).
    label = "hourly packs of the minute rollups, 7 days"
    started = time.perf_counter()
    rollups.pack_hours(now - timezone.timedelta(days=7, hours=1), now)
    timings[label] = round(time.perf_counter() - started, 1)
    print(f"  {label}: {timings[label]} s", flush=True)
    sql("ANALYZE")
    return timings


def pack_window(days: int) -> None:
    """The history above went straight into the tables, past the refresh that marks hours due
    for packing: mark every hour of it due, then pack them all (the timed pages then read
    packs wherever the hour is closed, and rows for the newest)."""
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    hours = [now - timezone.timedelta(hours=h) for h in range(days * 24 + 2)]
    with connection.cursor() as cursor:
        packing.mark_due(cursor, hours)
    packing.pack_all()
    sql("ANALYZE")


def median_ms(client: Client, urls: list[str], repeats: int) -> tuple[float, int]:
    client.get(urls[0])  # warm the connection and the template cache
    times, size = [], 0
    for attempt in range(repeats):
        url = urls[attempt % len(urls)]
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}")
        size = max(size, len(response.content))
    return statistics.median(times), size


def median_post_ms(client: Client, url: str, bodies: list[dict], repeats: int):
    client.post(url, bodies[0])  # warm
    times, size = [], 0
    for attempt in range(repeats):
        started = time.perf_counter()
        response = client.post(url, bodies[attempt % len(bodies)])
        times.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200 or "whatif-gate-memory" not in response.json()["whatif"]:
            raise RuntimeError(f"{url}: HTTP {response.status_code}, no dry run")
        size = max(size, len(response.content))
    return statistics.median(times), size


def time_previews(timed: list[str], repeats: int = 9) -> dict[str, tuple[float, int]]:
    """The guided form's what-if (the gates run dry, the placement drawn before and
    after) for a newcomer on an 8-card host with 30 days of history: on a card the author
    picks, and with the solver choosing among the host's cards."""
    author, _ = get_user_model().objects.get_or_create(username="bench-author")
    author.groups.add(Group.objects.get(name="oncall"))
    client = Client()
    client.force_login(author)
    newcomer, _ = ServedModel.objects.get_or_create(
        name="bench-newcomer",
        defaults={"weights_bytes": 6 * GIB, "num_layers": 32, "num_kv_heads": 8,
                  "head_dim": 128, "kv_dtype": "bf16", "p99_latency_slo_ms": 800},
    )  # fmt: skip
    last_card = {
        h.name: h.gpus.get(index=CARDS - 1).pk for h in Host.objects.filter(name__in=timed)
    }

    def body(host: str, **overrides) -> dict:
        return {
            "action": "add", "served_model": newcomer.pk, "host": host,
            "gpus": [last_card[host]], "card_count": 1, "isolation_mode": "time_slicing",
            "mps_acknowledged": "on", "kv_tokens_per_request": 4096,
            "expected_p95_concurrency": 10, "kv_reservation_basis": "p95",
            "admission_policy": "queue", "canary_share_pct": 10, "rollout_steps": 3,
        } | overrides  # fmt: skip

    url = "/proposals/new/preview/"
    return {
        "what-if preview, 8-card host": median_post_ms(
            client, url, [body(h) for h in timed], repeats
        ),
        "what-if preview, solver chooses": median_post_ms(
            client,
            url,
            [body(h, gpus=[], let_solver_choose="on", card_count=2) for h in timed],
            repeats,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=15)
    parser.add_argument("--days", type=int, default=30, help="hourly history of every card")
    parser.add_argument("--minute-hours", type=int, default=6, help="minute history, every card")
    parser.add_argument("--reuse", action="store_true", help="time the fleet already built")
    parser.add_argument("--only", default="", help="time only the pages whose label has this")
    parser.add_argument(
        "--packed", action="store_true", help="pack every closed hour first (packing.pack_all)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings.ALLOWED_HOSTS = ["testserver"]
    if args.reuse:  # the fleet and history of an earlier run, timed again
        hosts = list(Host.objects.filter(name__regex=r"^bench-[0-9]+$").order_by("name"))
        shared = list(Host.objects.filter(name__startswith="bench-shared-").order_by("name"))
        generation = {}
    else:
        print(f"building {args.hosts} hosts x {CARDS} cards, {args.days} days", flush=True)
        started = time.perf_counter()
        hosts = build_fleet(args.hosts)
        shared = build_shared_hosts(SHARED_HOSTS)
        generation = write_history(hosts, shared, args.days, args.minute_hours)
        print(f"  loaded in {time.perf_counter() - started:.0f} s", flush=True)
    if args.packed:
        started = time.perf_counter()
        pack_window(args.days)
        generation["packed every closed hour"] = round(time.perf_counter() - started, 1)
        print(f"  packed in {generation['packed every closed hour']} s", flush=True)
    user, _ = get_user_model().objects.get_or_create(username="bench-manager")
    user.groups.add(Group.objects.get(name="manager"))
    client = Client()
    client.force_login(user)
    timed = [h.name for h in hosts[:TIMED_HOSTS]]
    settle()  # as console.wsgi does in each web worker before its first request
    figures = {"hosts": args.hosts, "cards": args.hosts * CARDS, "generation_s": generation,
               "cores": os.cpu_count()}  # fmt: skip
    began = os.getloadavg()[0]  # a shared machine slows every figure: say how busy it was
    pages = {
        "fleet board /": ["/"],
        "fleet board refresh (page 1)": ["/?partial=1"],
        "host page /hosts/<name>/": [f"/hosts/{name}/" for name in timed],
        "host charts 24h (JSON)": [f"/hosts/{name}/charts/?window=24h" for name in timed],
        "host charts 30d (JSON)": [f"/hosts/{name}/charts/?window=30d" for name in timed],
        "host analyses (fragment)": [f"/hosts/{name}/analysis/" for name in timed],
        "host analyses, shared cards": [f"/hosts/{h.name}/analysis/" for h in shared],
        "ledger API": [f"/api/hosts/{name}/ledger/" for name in timed],
        # The board's filters and sorts, whole page (the target is the same as page 1's).
        "board filter: status": ["/?status=active"],
        "board filter: name": ["/?q=bench-00"],
        "board filter: label": ["/?label=rack:r12"],
        "board filter: problems only": ["/?problems=on"],
        **{f"board sort: {key}": [f"/?sort={key}"] for key in SORTS},
        "/metrics, whole fleet": ["/metrics"],
        f"/metrics, one shard of {METRICS_SHARDS}": [
            f"/metrics?shard={k}/{METRICS_SHARDS}" for k in range(METRICS_SHARDS)
        ],
        "OOM history /oom/ (4 weeks)": ["/oom/"],
        "OOM history, one host": [f"/oom/?host={name}" for name in timed],
        "audit trail /audit/": ["/audit/"],
        "audit trail, one host": [f"/audit/?host={name}" for name in timed],
        "audit trail, one actor": ["/audit/?actor=bench-actor-3"],
    }
    pages = {label: urls for label, urls in pages.items() if args.only in label}
    summarised = -math.inf
    for label, urls in pages.items():
        if "board" in label and time.monotonic() - summarised > BOARD_SUMMARY_EVERY_S:
            # What beat's refresh_host_summaries keeps fresh: out of the pages' times, its own
            # reported (the first run).
            started = time.perf_counter()
            written = board.refresh_summaries()
            spent = (time.perf_counter() - started) * 1000
            summarised = time.monotonic()
            # Not a page: no median_ms, so report.py's table of pages leaves it out.
            figures.setdefault("board summary refresh (the job)",
                               {"ms": round(spent, 1), "rows_written": written})  # fmt: skip
            print(f"  {'board summary refresh':28} {spent:12.1f} ms  {written:>9,} rows written")
        median, size = median_ms(client, urls, args.requests)
        figures[label] = {"median_ms": round(median, 1), "bytes": size}
        print(f"  {label:28} median {median:7.1f} ms  {size:>9,} bytes", flush=True)
    for label, (median, size) in (time_previews(timed) if not args.only else {}).items():
        figures[label] = {"median_ms": round(median, 1), "bytes": size}
        print(f"  {label:28} median {median:7.1f} ms  {size:>9,} bytes", flush=True)
    figures["load_average"] = [began, os.getloadavg()[0]]
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
