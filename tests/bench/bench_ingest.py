"""Ingest throughput: process-sample rows through the real ingest path, against the ORM.

    python tests/bench/bench_ingest.py [--hosts 50] [--intervals 40] [--rounds 5] [--broker URL]...
        [--json OUT]

Needs the database of DATABASE_URL migrated (make bench uses a separate bench database).

1. Real ingest path: agent batches (8 cards, 4 processes a card, like a full inference host)
   travel as JSON and are handed, as messages, to the ingest worker's flush in groups of 500
   (its default): typed decoding with the field checks (msgspec), the checks across fields,
   batch-id claim, binary COPY into the partitioned sample tables, events, faults, collector
   status, dirty-minute marks. Throughput counts only process-sample rows against the whole
   wall time; of it, the time in the writer (inventory.ingest.writer.ingest_batches,
   given the decoded and verified batches) is reported too. The whole path and the raw COPY
   floor (the same rows, already built, COPYed and nothing else) run in alternating rounds
   (--rounds), and the best round of each counts: on a shared machine one run of either can
   be a third slower than the next.
2. The rollup refresh that follows (inventory.timeseries.rollups): the 1-minute and 1-hour
   rollups of every dirty minute recomputed from those rows; and ingest plus refresh together.
3. Through each --broker (default: CELERY_BROKER_URL, where set; Redis or RabbitMQ), the
   same with the broker in between: publish everything (signed and compressed, as agents do),
   then time the real ingest worker draining the queue, with its defaults (groups of up to
   500, or what arrived within 0.5 s of a group's first); and --workers worker processes
   draining it together.
4. The plain Django ORM path for the same messages: decode, read the process columns back
   into rows (about 2 % of its time), build CardSample and ProcessSample instances,
   bulk_create them in the same groups (no status, no events: the ORM path does less work
   than the real one).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django

django.setup()

from django.db import connection, transaction
from django.utils import timezone

from inventory.ingest import samples
from inventory.ingest import worker as ingest_worker
from inventory.ingest.worker import GROUP_WAIT_S, IngestWorker, freeze_what_started
from inventory.models import (
    CardSample,
    Deployment,
    Gpu,
    Host,
    ProcessSample,
    ServedModel,
)
from inventory.timeseries import partitions, rollups
from inventory.wire import decoding as batch_decoding
from inventory.wire import signing
from inventory.wire.columns import rows_of_wire
from inventory.wire.compression import BATCH_COMPRESSION
from inventory.wire.schema import on_the_wire

GIB = 1024**3
CARDS, PROCESSES_PER_CARD = 8, 4


class Message:
    def __init__(self, signature: str) -> None:
        self.headers = {signing.HEADER: signature}

    def ack(self) -> None:
        pass


def build_fleet(hosts: int) -> list[tuple[Host, list[Gpu], list[Deployment]]]:
    model, _ = ServedModel.objects.get_or_create(
        name="bench-model", defaults={"weights_bytes": 16 * GIB, "kv_bytes_per_token": 131072}
    )
    fleet = []
    for h in range(hosts):
        host, _ = Host.objects.get_or_create(name=f"bench-{h:04d}", defaults={"collector": "none"})
        gpus = [
            Gpu.objects.get_or_create(
                host=host,
                index=i,
                defaults={
                    "uuid": f"GPU-00000000-0000-4000-8000-{h:08d}{i:04d}",
                    "product_name": "NVIDIA H100 80GB HBM3",
                    "memory_total_bytes": 81559 * 1024**2,
                },
            )[0]
            for i in range(CARDS)
        ]
        deployments = list(host.deployments.all()) or [
            Deployment.objects.create(served_model=model, host=host, isolation_mode="gpu_group")
            for _ in range(PROCESSES_PER_CARD)
        ]
        fleet.append((host, gpus, deployments))
    return fleet


def make_batch(
    host, gpus, deployments, seq: int, end: float, sampler: str, noise: random.Random | None = None
) -> dict:
    """One host's batch. With `noise`, every memory figure moves by up to 256 MiB from one
    interval to the next (a busy host's allocator): what compresses worst."""

    def jitter(value: int) -> int:
        return value + noise.randrange(-(2**28), 2**28) if noise else value

    cards, processes = [], []
    for gpu in gpus:
        used = jitter(60 * GIB + seq * 1024**2)
        cards.append({
            "index": gpu.index, "uuid": gpu.uuid, "name": gpu.product_name, "lost": False,
            "samples": 10, "total_bytes": gpu.memory_total_bytes, "used_bytes_max": used,
            "used_bytes_last": used - GIB, "reserved_bytes_max": 479 * 1024**2,
            "reserved_bytes_last": 479 * 1024**2, "free_bytes_min": 20 * GIB,
            "free_bytes_max": 21 * GIB, "free_bytes_last": 21 * GIB, "util_gpu_max": 97,
            "util_gpu_last": 80, "util_memory_max": 60, "util_memory_last": 50,
            "mig_current": None, "mig_pending": None, "compute_mode": 0, "unsupported": [],
        })  # fmt: skip
        for n, deployment in enumerate(deployments):
            processes.append({
                "card_index": gpu.index, "card_uuid": gpu.uuid, "pid": 10_000 + n,
                "kind": "compute", "name": "python3 -m vllm.entrypoints.openai.api_server",
                "name_error": None, "used_bytes_max": jitter(15 * GIB),
                "used_bytes_last": jitter(14 * GIB),
                "gpu_instance_id": None, "compute_instance_id": None, "mig_device_uuid": None,
                "deployment_id": str(deployment.pk), "first_seen": end - 10,
                "last_seen": end, "samples": 10,
                "allocator": {"reserved_bytes": jitter(14 * GIB),
                              "allocated_bytes": jitter(13 * GIB),
                              "inactive_split_bytes": GIB // 4,
                              "largest_free_block_bytes": GIB // 2},
            })  # fmt: skip
    return {
        "schema": "gpu-telemetry-batch/1", "batch_id": str(uuid.uuid4()), "sampler_id": sampler,
        "host": host.name, "seq": seq, "interval_start": end - 10, "interval_end": end,
        "polls": 10, "driver_version": "590.48.01", "cards": cards, "mig_devices": [],
        "processes": processes, "engines": [], "events": [], "events_dropped": 0,
        "faults": [], "faults_dropped": 0, "agent": {"outbox_depth": 0, "outbox_dropped": 0},
    }  # fmt: skip


def wire_batches(
    fleet, intervals: int, start: float, noise: random.Random | None = None
) -> list[tuple[bytes, str]]:
    """The batches as the broker carries them: JSON bodies with the process rows as columns,
    as agents publish them (batch_schema.on_the_wire), each signed by its host."""
    samplers = {host.name: str(uuid.uuid4()) for host, _, _ in fleet}
    wire = []
    for seq in range(1, intervals + 1):
        for host, gpus, deps in fleet:
            batch = make_batch(host, gpus, deps, seq, start + 10 * seq, samplers[host.name], noise)
            body = signing.encode(on_the_wire(batch))
            wire.append((body, signing.sign(host.agent_secret, body)))
    return wire


def ingest_path(wire: list[tuple[bytes, str]], group: int) -> float:
    worker = IngestWorker(connection=None, max_group=group, max_wait_s=0)
    started = time.perf_counter()
    for offset in range(0, len(wire), group):
        for body, signature in wire[offset : offset + group]:
            worker.add(body, Message(signature))
        worker.flush()
        if worker.pending or worker.dead_lettered:
            raise RuntimeError("ingest failed during the benchmark")
    return time.perf_counter() - started


def _publish_all(conn, wire: list[tuple[bytes, str]]) -> None:
    """Everything on the ingest queue first, as the agents publish it: signed, compressed."""
    from inventory.agent.transport import INGEST_QUEUE

    channel = conn.channel()
    INGEST_QUEUE(channel).declare()
    INGEST_QUEUE(channel).purge()
    producer = conn.Producer()
    for body, signature in wire:
        producer.publish(body, content_type="application/json", content_encoding="utf-8",
                         headers={signing.HEADER: signature}, compression=BATCH_COMPRESSION,
                         exchange=INGEST_QUEUE.exchange,
                         routing_key=INGEST_QUEUE.routing_key, delivery_mode=2)  # fmt: skip


def broker_path(url: str, wire: list[tuple[bytes, str]], group: int) -> float:
    from kombu import Connection

    with Connection(url) as conn:
        _publish_all(conn, wire)
        worker = _UntilWritten(conn, len(wire), max_group=group)
        started = time.perf_counter()
        worker.run(safety_interval=min(1.0, GROUP_WAIT_S))
        return worker.finished_at - started


def _consume(url: str, group: int) -> None:
    from kombu import Connection

    connection.close()  # a connection of this process's own
    with Connection(url) as conn:
        IngestWorker(conn, max_group=group).run(safety_interval=min(1.0, GROUP_WAIT_S))


def broker_path_parallel(url: str, wire: list[tuple[bytes, str]], group: int, n: int) -> float:
    """`n` ingest worker processes draining the queue together, as a deployment runs them:
    the wall time until the database holds every batch."""
    import multiprocessing

    from kombu import Connection

    from inventory.models import IngestedBatch

    with Connection(url) as conn:
        _publish_all(conn, wire)
    before = IngestedBatch.objects.count()
    connection.close()
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_consume, args=(url, group)) for _ in range(n)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    try:
        deadline = time.monotonic() + 600
        while IngestedBatch.objects.count() < before + len(wire):
            if time.monotonic() > deadline:
                raise RuntimeError("parallel broker path did not finish in 10 minutes")
            time.sleep(0.02)
        return time.perf_counter() - started
    finally:
        for worker in workers:
            worker.terminate()
            worker.join()


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class _UntilWritten(IngestWorker):
    """The real worker, with its default group size and wait, stopping once it has written
    `target` batches; `finished_at` is when the group that completed them was committed, so
    the loop's idle pause after it is not counted."""

    def __init__(self, connection, target: int, **options):
        super().__init__(connection, **options)
        self.target = target
        self.deadline = time.monotonic() + 600
        self.finished_at: float | None = None

    def flush(self) -> None:
        super().flush()
        if self.written >= self.target and self.finished_at is None:
            self.finished_at = time.perf_counter()
            self.should_stop = True

    def on_iteration(self) -> None:
        super().on_iteration()
        if self.finished_at is None and time.monotonic() > self.deadline:
            raise RuntimeError("broker path did not finish in 10 minutes")


def _writer_and_floor(fleet, args, start: float) -> dict:
    """One round: the writer on fresh batches, its rollups refreshed, then the raw COPY floor
    on other fresh batches. Rounds alternate the two, so that a slower spell of a shared
    machine falls on both; the best round of each is the figure."""
    wire = wire_batches(fleet, args.intervals, start)
    with (
        _time_spent_in(ingest_worker, "ingest_batches") as writer_stage,
        _time_spent_in(samples, "write_processes") as process_stage,
        _time_spent_in(samples, "write") as other_stage,
    ):
        ingest_s = ingest_path(wire, args.group)
    started = time.perf_counter()
    rollups.refresh_all()
    refresh_s = time.perf_counter() - started
    raw_copy_s = raw_copy_path(wire_batches(fleet, args.intervals, start + 500), fleet)
    return {
        "wire": wire,
        "ingest_s": ingest_s,
        "refresh_s": refresh_s,
        "raw_copy_s": raw_copy_s,
        "writer_stage_s": writer_stage["seconds"],
        "process_copy_s": process_stage["seconds"],
        "other_copy_s": other_stage["seconds"],
    }


def raw_copy_path(wire: list[tuple[bytes, str]], fleet) -> float:
    """The floor: the same process rows, already built, binary-COPYed into the same table in
    the same groups, and nothing else (no decode, check, signature, claim or status)."""
    gpu_ids = {gpu.uuid: gpu.pk for _, gpus, _ in fleet for gpu in gpus}
    groups = []
    for offset in range(0, len(wire), 500):
        rows = []
        for body, _ in wire[offset : offset + 500]:
            batch = json.loads(body)
            ts = dt.datetime.fromtimestamp(batch["interval_end"], tz=dt.UTC)
            batch_id = uuid.UUID(batch["batch_id"])
            for p in rows_of_wire(batch["processes"]):
                alloc = p["allocator"]
                rows.append((gpu_ids[p["card_uuid"]], ts, batch_id, p["pid"], p["kind"],
                             p["name"], int(p["deployment_id"]), None, p["used_bytes_max"],
                             p["used_bytes_last"], p["samples"], alloc["reserved_bytes"],
                             alloc["allocated_bytes"], alloc["inactive_split_bytes"],
                             alloc["largest_free_block_bytes"], 0.5))  # fmt: skip
        groups.append(rows)
    columns = ", ".join(samples.PROCESS_COLUMNS)
    started = time.perf_counter()
    for rows in groups:
        with (
            transaction.atomic(),
            connection.cursor() as wrapper,
            wrapper.cursor.copy(
                f"COPY inventory_process_sample ({columns}) FROM STDIN (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(samples.PROCESS_TYPES)
            for row in rows:
                copy.write_row(row)
    return time.perf_counter() - started


@contextlib.contextmanager
def _time_spent_in(module, name: str):
    """The seconds spent in module.name while the block runs (the writer's COPY stage)."""
    real = getattr(module, name)
    spent = {"seconds": 0.0}

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent["seconds"] += time.perf_counter() - started

    setattr(module, name, timed)
    try:
        yield spent
    finally:
        setattr(module, name, real)


def decode_only(wire: list[tuple[bytes, str]]) -> float:
    """The typed decoding (with its field checks) of every body, and nothing else: the part of
    the writer's time that grows with the JSON a message carries."""
    started = time.perf_counter()
    for body, _ in wire:
        batch_decoding.decode(body)
    return time.perf_counter() - started


def orm_path(wire: list[tuple[bytes, str]], fleet) -> float:
    """The same messages written the plain Django way: decode, build models, bulk_create."""
    gpu_ids = {gpu.uuid: gpu.pk for _, gpus, _ in fleet for gpu in gpus}
    started = time.perf_counter()
    with transaction.atomic():
        for offset in range(0, len(wire), 200):
            cards, processes = [], []
            for body, _ in wire[offset : offset + 200]:
                batch = json.loads(body)
                ts = dt.datetime.fromtimestamp(batch["interval_end"], tz=dt.UTC)
                for card in batch["cards"]:
                    cards.append(CardSample(
                        gpu_id=gpu_ids[card["uuid"]], ts=ts, batch_id=batch["batch_id"],
                        interval_s=10.0, samples=card["samples"], lost=card["lost"],
                        total_bytes=card["total_bytes"], used_max=card["used_bytes_max"],
                        used_last=card["used_bytes_last"],
                        reserved_last=card["reserved_bytes_last"],
                        free_min=card["free_bytes_min"], free_last=card["free_bytes_last"],
                        util_gpu_max=card["util_gpu_max"], util_gpu_last=card["util_gpu_last"],
                        util_memory_max=card["util_memory_max"],
                    ))  # fmt: skip
                for row in rows_of_wire(batch["processes"]):
                    alloc = row["allocator"]
                    processes.append(ProcessSample(
                        gpu_id=gpu_ids[row["card_uuid"]], ts=ts, batch_id=batch["batch_id"],
                        pid=row["pid"], kind=row["kind"], name=row["name"],
                        deployment_id=int(row["deployment_id"]), used_max=row["used_bytes_max"],
                        used_last=row["used_bytes_last"], samples=row["samples"],
                        alloc_reserved_last=alloc["reserved_bytes"],
                        alloc_allocated_last=alloc["allocated_bytes"],
                        alloc_inactive_split_last=alloc["inactive_split_bytes"],
                        alloc_largest_free_last=alloc["largest_free_block_bytes"],
                    ))  # fmt: skip
            CardSample.objects.bulk_create(cards, batch_size=1000)
            ProcessSample.objects.bulk_create(processes, batch_size=1000)
    return time.perf_counter() - started


def _ingest_shard(args) -> None:
    wire, group = args
    connection.close()  # a fresh connection per worker process
    ingest_path(wire, group)
    rollups.refresh_all()  # the refresh shares the workers' cores, so it is counted too


def _orm_shard(args) -> None:
    wire, hosts = args
    connection.close()
    orm_path(wire, build_fleet(hosts))


def in_parallel(function, shards: list) -> float:
    """Wall time for `workers` processes each running `function` on its shard at once."""
    import multiprocessing

    connection.close()
    context = multiprocessing.get_context("fork")
    started = time.perf_counter()
    with context.Pool(len(shards)) as pool:
        pool.map(function, shards)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--intervals", type=int, default=40)
    parser.add_argument("--group", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2, help="parallel ingest workers")
    parser.add_argument("--broker", action="append", help="repeatable; default CELERY_BROKER_URL")
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="writer and raw COPY rounds, alternated; the best of each counts",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    fleet = build_fleet(args.hosts)
    freeze_what_started()  # as the ingest_worker command does
    now = time.time()
    partitions.ensure_partitions(
        timezone.now() - timezone.timedelta(hours=5), timezone.now() + timezone.timedelta(hours=1)
    )
    batches = args.hosts * args.intervals
    process_rows = batches * CARDS * PROCESSES_PER_CARD
    print(f"{batches} batches from {args.hosts} hosts: {process_rows} process rows, "
          f"{batches * CARDS} card rows")  # fmt: skip
    host, gpus, deployments = fleet[0]
    as_rows = signing.encode(make_batch(host, gpus, deployments, 1, now, str(uuid.uuid4())))
    # One group first, as a worker that has run a while: its first write pays for the
    # connection's and the server's caches, which the raw COPY, run later, does not.
    ingest_path(wire_batches(fleet, max(1, args.group // args.hosts), now - 14_400), args.group)
    rollups.refresh_all()  # its minutes, so that the refresh timed below has only the run's
    rounds = [_writer_and_floor(fleet, args, now - 14_000 + 1_000 * k) for k in range(args.rounds)]
    best = min(rounds, key=lambda r: r["ingest_s"])
    ingest_s, measured = best["ingest_s"], best["wire"]
    raw_copy_s = min(r["raw_copy_s"] for r in rounds)
    refresh_s = statistics.median(r["refresh_s"] for r in rounds)
    default_broker = (
        [os.environ["CELERY_BROKER_URL"]] if os.environ.get("CELERY_BROKER_URL") else []
    )
    brokers = []
    for url in args.broker or default_broker:
        seconds = broker_path(url, wire_batches(fleet, args.intervals, now - 5400), args.group)
        together = broker_path_parallel(
            url, wire_batches(fleet, args.intervals, now - 4800), args.group, args.workers
        )
        brokers.append({
            "broker": _without_credentials(url),
            "seconds": seconds,
            "rows_per_s": process_rows / seconds,
            "workers": args.workers,
            "parallel_rows_per_s": process_rows / together,
        })  # fmt: skip
    orm_s = orm_path(wire_batches(fleet, args.intervals, now - 3600), fleet)
    decode_s = decode_only(wire_batches(fleet, args.intervals, now - 3000))
    # Several workers at once, one per core, as a deployment runs them: each takes every
    # n-th message, so each group still mixes hosts.
    shards = args.workers
    wire = wire_batches(fleet, args.intervals, now - 6600)
    parallel_ingest_s = in_parallel(
        _ingest_shard, [(wire[i::shards], args.group) for i in range(shards)]
    )
    wire = wire_batches(fleet, args.intervals, now - 2400)
    parallel_orm_s = in_parallel(_orm_shard, [(wire[i::shards], args.hosts) for i in range(shards)])
    report = {
        "batches": batches,
        "process_rows": process_rows,
        "group": args.group,
        "ingest_path_s": ingest_s,
        "ingest_path_rows_per_s": process_rows / ingest_s,
        "rollup_refresh_s": refresh_s,
        "ingest_and_rollups_rows_per_s": process_rows / (ingest_s + refresh_s),
        "brokers": brokers,
        "orm_bulk_create_s": orm_s,
        "orm_bulk_create_rows_per_s": process_rows / orm_s,
        "postgres": connection.cursor().connection.info.server_version,
    }
    report["speedup_vs_orm"] = orm_s / ingest_s
    report["raw_copy_rows_per_s"] = process_rows / raw_copy_s
    report["writer_fraction_of_raw_copy"] = raw_copy_s / ingest_s
    report["rounds"] = args.rounds
    report["ingest_path_rounds_s"] = [r["ingest_s"] for r in rounds]
    report["raw_copy_rounds_s"] = [r["raw_copy_s"] for r in rounds]
    report["writer_fraction_of_raw_copy_median"] = statistics.median(
        r["raw_copy_s"] for r in rounds
    ) / statistics.median(r["ingest_s"] for r in rounds)
    # The writing alone (ingest_batches: the checks across fields, claim, COPYs, events,
    # statuses), without taking the messages in (typed decoding with the field checks) and
    # their signatures.
    report["writer_stage_s"] = best["writer_stage_s"]
    report["writer_stage_fraction_of_raw_copy"] = raw_copy_s / best["writer_stage_s"]
    report["process_copy_s"] = best["process_copy_s"]
    report["other_copy_s"] = best["other_copy_s"]
    report["decode_only_s"] = decode_s
    report["decode_share_of_writer"] = decode_s / ingest_s
    report["wire_bytes_per_batch"] = sum(len(body) for body, _ in measured) / len(measured)
    report["row_form_bytes_per_batch"] = len(as_rows)
    report["workers"] = shards
    # Each worker refreshes what it wrote: the figure includes the rollups.
    report["parallel_ingest_rows_per_s"] = process_rows / parallel_ingest_s
    report["parallel_orm_rows_per_s"] = process_rows / parallel_orm_s
    report["parallel_speedup_vs_orm"] = parallel_orm_s / parallel_ingest_s
    print(f"  real ingest path   {report['ingest_path_rows_per_s']:>10,.0f} process rows/s "
          f"({ingest_s:.2f} s)")  # fmt: skip
    print(f"  + rollup refresh   {report['ingest_and_rollups_rows_per_s']:>10,.0f} process rows/s "
          f"(refresh {refresh_s:.2f} s)")  # fmt: skip
    for broker in brokers:
        print(f"  through {broker['broker']}: {broker['rows_per_s']:,.0f} process rows/s "
              f"({broker['seconds']:.2f} s); {broker['workers']} workers at once "
              f"{broker['parallel_rows_per_s']:,.0f}")  # fmt: skip
    print(f"  ORM bulk_create    {report['orm_bulk_create_rows_per_s']:>10,.0f} process rows/s "
          f"({orm_s:.2f} s)")  # fmt: skip
    print(f"  real path / ORM    {report['speedup_vs_orm']:.1f}x")
    print(f"  raw binary COPY    {report['raw_copy_rows_per_s']:>10,.0f} process rows/s: the "
          f"writer reaches {report['writer_fraction_of_raw_copy']:.0%} of it (best of "
          f"{args.rounds} rounds each; {report['writer_fraction_of_raw_copy_median']:.0%} "
          f"of the medians)")  # fmt: skip
    print(f"  of the writer's {ingest_s:.2f} s, {best['writer_stage_s']:.2f} s writing "
          f"(ingest_batches), the rest taking messages in and checking their signatures: "
          f"writing alone reaches {report['writer_stage_fraction_of_raw_copy']:.0%} of raw "
          f"COPY")  # fmt: skip
    print(f"  rounds: writer {' '.join(f'{r:.3f}' for r in report['ingest_path_rounds_s'])} s,"
          f" raw {' '.join(f'{r:.3f}' for r in report['raw_copy_rounds_s'])} s")  # fmt: skip
    print(f"  COPY of the process rows, each batch checked as they go "
          f"{best['process_copy_s']:.2f} s, of the other tables {best['other_copy_s']:.2f} s, "
          f"of the writer's {ingest_s:.2f} s")  # fmt: skip
    print(f"  typed decoding alone {decode_s:.2f} s: "
          f"{report['decode_share_of_writer']:.0%} of the writer's time")  # fmt: skip
    print(f"  {shards} workers at once (ingest + rollups): real path "
          f"{report['parallel_ingest_rows_per_s']:,.0f} rows/s, ORM "
          f"{report['parallel_orm_rows_per_s']:,.0f} rows/s "
          f"({report['parallel_speedup_vs_orm']:.1f}x)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
