"""Write one agent batch into PostgreSQL: once, whatever the broker redelivers.

The batch id goes into IngestedBatch first, in the same transaction as the rows; a batch seen
before inserts nothing. Rows are COPYed into temporary staging tables, then moved into the
partitioned sample tables and folded into the 1-minute and 1-hour rollups with set-based SQL,
so a batch costs a handful of statements however many rows it carries.
"""

import datetime as dt
import logging
import uuid
from dataclasses import dataclass

from django.db import connection, transaction

from console.audit import record as audit_record
from console.audit import snapshot
from inventory.models import (
    CollectorFault,
    CollectorStatus,
    Deployment,
    Event,
    Gpu,
    Host,
    IngestedBatch,
    MigSlice,
)
from inventory.timeseries import partitions, rollups

log = logging.getLogger(__name__)

SCHEMA = "gpu-telemetry-batch/1"
_REQUIRED = ("schema", "batch_id", "sampler_id", "host", "seq", "interval_start", "interval_end")


class BatchRejected(Exception):
    """The batch can never be written as it is; retrying would not help."""


@dataclass(frozen=True)
class IngestResult:
    batch_id: str
    duplicate: bool
    rows: int = 0
    events: int = 0


def _ts(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def validate(payload: dict) -> None:
    if not isinstance(payload, dict):
        raise BatchRejected(f"a batch is a JSON object, got {type(payload).__name__}")
    missing = [key for key in _REQUIRED if key not in payload]
    if missing:
        raise BatchRejected(f"batch lacks {', '.join(missing)}")
    if payload["schema"] != SCHEMA:
        raise BatchRejected(f"unknown batch schema {payload['schema']!r}; expected {SCHEMA}")
    try:
        uuid.UUID(str(payload["batch_id"]))
        uuid.UUID(str(payload["sampler_id"]))
        float(payload["interval_start"]), float(payload["interval_end"])
    except (TypeError, ValueError) as error:
        raise BatchRejected(f"malformed batch header: {error}") from None
    if payload["interval_end"] < payload["interval_start"]:
        raise BatchRejected("interval_end is before interval_start")


def ingest_batch(payload: dict) -> IngestResult:
    validate(payload)
    try:
        host = Host.objects.get(name=payload["host"])
    except Host.DoesNotExist:
        raise BatchRejected(
            f"unknown host {payload['host']!r}: register it in the inventory first"
        ) from None
    start, end = _ts(payload["interval_start"]), _ts(payload["interval_end"])
    # Partitions are created in their own transactions, so a failed batch cannot undo them.
    partitions.ensure_partitions(start, end)
    with transaction.atomic():
        if not _claim(payload, host, start, end):
            return IngestResult(str(payload["batch_id"]), duplicate=True)
        maps = _Maps.load(host, payload)
        rows = _write_samples(payload, maps, end)
        events = _write_events(payload, host, maps)
        _write_faults(payload, host, maps)
        _update_status(payload, host, end)
        IngestedBatch.objects.filter(batch_id=payload["batch_id"]).update(rows=rows)
    return IngestResult(str(payload["batch_id"]), duplicate=False, rows=rows, events=events)


def _claim(payload, host, start, end) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO inventory_ingestedbatch "
            "(batch_id, host_id, sampler_id, seq, interval_start, interval_end, received_at, rows)"
            " VALUES (%s, %s, %s, %s, %s, %s, now(), 0) ON CONFLICT (batch_id) DO NOTHING",
            [payload["batch_id"], host.pk, payload["sampler_id"], payload["seq"], start, end],
        )
        return cursor.rowcount == 1


@dataclass
class _Maps:
    """Card, MIG device and deployment ids of one host, by the keys a batch carries."""

    gpu_by_index: dict[int, int]
    gpu_by_uuid: dict[str, int]
    mig_by_uuid: dict[str, int]
    deployments: set[int]

    @classmethod
    def load(cls, host: Host, payload: dict) -> "_Maps":
        known = {gpu.uuid: gpu for gpu in host.gpus.all()}
        for card in payload.get("cards", []):
            if card.get("uuid") and card["uuid"] not in known:
                known[card["uuid"]] = _discover_card(host, card)
        by_index = {gpu.index: gpu.pk for gpu in known.values()}
        mig = dict(
            MigSlice.objects.filter(gpu__host=host).exclude(uuid="").values_list("uuid", "pk")
        )
        deployments = set(Deployment.objects.filter(host=host).values_list("pk", flat=True))
        return cls(by_index, {u: g.pk for u, g in known.items()}, mig, deployments)

    def gpu_id(self, row: dict) -> int | None:
        uuid_ = row.get("card_uuid") or row.get("uuid")
        if uuid_ and uuid_ in self.gpu_by_uuid:
            return self.gpu_by_uuid[uuid_]
        index = row.get("card_index", row.get("index"))
        return self.gpu_by_index.get(index)

    def deployment_id(self, raw) -> int | None:
        try:
            value = int(raw)
        except (TypeError, ValueError):
            return None
        return value if value in self.deployments else None


def _discover_card(host: Host, card: dict) -> Gpu:
    """A card the inventory did not know: record it, as the system, in the audit trail."""
    gpu = Gpu.objects.create(
        host=host,
        index=card["index"],
        uuid=card["uuid"],
        product_name=card.get("name") or "unknown",
        memory_total_bytes=card.get("total_bytes") or 0,
    )
    audit_record(
        actor=None,
        action="gpu.discover",
        obj=gpu,
        before=None,
        after=snapshot(gpu),
        host=host,
        comment="first seen in telemetry",
    )
    return gpu


def _fragmentation(row: dict) -> float | None:
    alloc = row.get("allocator") or {}
    reserved, allocated = alloc.get("reserved_bytes"), alloc.get("allocated_bytes")
    largest = alloc.get("largest_free_block_bytes")
    if reserved is None or allocated is None or largest is None:
        return alloc.get("fragmentation_max")
    free = reserved - allocated
    if free <= 0:
        return 0.0
    return max(0.0, 1.0 - largest / free)


def _write_samples(payload: dict, maps: _Maps, end: dt.datetime) -> int:
    batch_id = payload["batch_id"]
    interval_s = max(0.0, payload["interval_end"] - payload["interval_start"])
    card_frag: dict[int, float] = {}
    process_rows = []
    for row in payload.get("processes", []):
        gpu_id = maps.gpu_id(row)
        if gpu_id is None:
            continue
        alloc = row.get("allocator") or {}
        frag = _fragmentation(row)
        if frag is not None:
            card_frag[gpu_id] = max(frag, card_frag.get(gpu_id, 0.0))
        process_rows.append(
            (
                gpu_id,
                end,
                batch_id,
                row["pid"],
                row.get("kind") or "compute",
                row.get("name"),
                maps.deployment_id(row.get("deployment_id")),
                maps.mig_by_uuid.get(row.get("mig_device_uuid")),
                row.get("used_bytes_max"),
                row.get("used_bytes_last"),
                row.get("samples") or 0,
                alloc.get("reserved_bytes"),
                alloc.get("allocated_bytes"),
                alloc.get("inactive_split_bytes"),
                alloc.get("largest_free_block_bytes"),
                frag,
            )
        )
    card_rows = []
    for card in payload.get("cards", []):
        gpu_id = maps.gpu_id(card)
        if gpu_id is None:
            continue
        card_rows.append(
            (
                gpu_id,
                end,
                batch_id,
                interval_s,
                card.get("samples") or 0,
                bool(card.get("lost")),
                card.get("total_bytes"),
                card.get("used_bytes_max"),
                card.get("used_bytes_last"),
                card.get("reserved_bytes_last"),
                card.get("free_bytes_min"),
                card.get("free_bytes_last"),
                card.get("util_gpu_max"),
                card.get("util_gpu_last"),
                card.get("util_memory_max"),
                card_frag.get(gpu_id),
            )
        )
    engine_rows = []
    for row in payload.get("engines", []):
        deployment_id = maps.deployment_id(row.get("deployment_id"))
        if deployment_id is None:
            continue
        latency = (row.get("latency") or {}).get("e2e") or {}
        engine_rows.append(
            (
                deployment_id,
                end,
                batch_id,
                row.get("kv_cache_usage_max"),
                row.get("kv_cache_usage_last"),
                row.get("requests_running_max"),
                row.get("requests_running_last"),
                row.get("requests_waiting_max"),
                row.get("requests_waiting_last"),
                row.get("vram_bytes_max"),
                latency.get("count"),
                latency.get("p50_s"),
                latency.get("p95_s"),
                latency.get("p99_s"),
            )
        )
    mig_rows = [
        (
            maps.mig_by_uuid[row["uuid"]],
            end,
            batch_id,
            row.get("total_bytes"),
            row.get("used_bytes_max"),
            row.get("used_bytes_last"),
            row.get("free_bytes_min"),
        )
        for row in payload.get("mig_devices", [])
        if row.get("uuid") in maps.mig_by_uuid
    ]
    rollups.write(card_rows, process_rows, engine_rows, mig_rows)
    return len(card_rows) + len(process_rows) + len(engine_rows) + len(mig_rows)


def _process_snapshot(payload: dict, card_index, card_uuid) -> list[dict]:
    return [
        {
            "pid": row["pid"],
            "name": row.get("name"),
            "deployment_id": row.get("deployment_id"),
            "used_bytes": row.get("used_bytes_max"),
            "allocator": row.get("allocator"),
        }
        for row in payload.get("processes", [])
        if row.get("card_uuid") == card_uuid or row.get("card_index") == card_index
    ]


_SNAPSHOT_FIGURES = ("requested_bytes", "free_bytes", "capacity_bytes", "mig_device_uuid")


def _event_snapshot(payload: dict, row: dict, detail: dict) -> dict:
    """The card's memory at the event: from the agent when it took one, else from the batch."""
    processes = detail.pop("processes", None)
    if processes is None:
        processes = _process_snapshot(payload, row.get("card_index"), row.get("card_uuid"))
    snapshot_ = {key: detail[key] for key in _SNAPSHOT_FIGURES if key in detail}
    snapshot_["processes"] = [_snapshot_process(process) for process in processes]
    return snapshot_


_ALLOCATOR_FIGURES = (
    "reserved_bytes",
    "allocated_bytes",
    "inactive_split_bytes",
    "largest_free_block_bytes",
)


def _snapshot_process(process: dict) -> dict:
    """One shape for a process in a snapshot, whether its allocator figures came nested or flat."""
    allocator = process.get("allocator") or {
        key: process[key] for key in _ALLOCATOR_FIGURES if key in process
    }
    return {
        "pid": process.get("pid"),
        "name": process.get("name"),
        "deployment_id": process.get("deployment_id"),
        "used_bytes": process.get("used_bytes"),
        "allocator": allocator or None,
    }


def _write_events(payload: dict, host: Host, maps: _Maps) -> int:
    events = []
    for position, row in enumerate(payload.get("events", [])):
        detail = dict(row.get("detail") or {})
        kind = row.get("kind")
        if kind == "xid" and detail.get("xid") == 79:
            kind = Event.Kind.GPU_LOST
        if kind not in Event.Kind.values:
            kind = Event.Kind.XID if "xid" in detail else None
        if kind is None:
            continue
        snapshot_ = _event_snapshot(payload, row, detail)
        events.append(
            Event(
                host=host,
                gpu_id=maps.gpu_id(row),
                deployment_id=maps.deployment_id(detail.get("deployment_id")),
                kind=kind,
                at=_ts(row["ts"]),
                xid=detail.get("xid"),
                detail=detail,
                snapshot=snapshot_,
                batch_id=payload["batch_id"],
                position=position,
            )
        )
    Event.objects.bulk_create(events, ignore_conflicts=True)
    return len(events)


def _write_faults(payload: dict, host: Host, maps: _Maps) -> None:
    CollectorFault.objects.bulk_create(
        CollectorFault(
            host=host,
            gpu_id=maps.gpu_id(row) if row.get("card_index") is not None else None,
            card_index=row.get("card_index"),
            call=str(row.get("call", ""))[:100],
            error=str(row.get("error", ""))[:100],
            message=str(row.get("message", "")),
            count=row.get("count") or 1,
            first_at=_ts(row.get("first_ts") or payload["interval_start"]),
            last_at=_ts(row.get("last_ts") or payload["interval_end"]),
            batch_id=payload["batch_id"],
        )
        for row in payload.get("faults", [])
    )


def _update_status(payload: dict, host: Host, end: dt.datetime) -> None:
    status, _ = CollectorStatus.objects.select_for_update().get_or_create(host=host)
    sampler_id = uuid.UUID(str(payload["sampler_id"]))
    seq = int(payload["seq"])
    if status.sampler_id == sampler_id and seq > status.last_seq + 1:
        status.missing_batches += seq - status.last_seq - 1
    if status.sampler_id != sampler_id or seq > status.last_seq:
        status.sampler_id, status.last_seq = sampler_id, seq
    if status.last_sample_at is None or end > status.last_sample_at:
        status.last_sample_at = end
    status.last_batch_at = dt.datetime.now(tz=dt.UTC)
    status.batches += 1
    faults = sum(int(row.get("count") or 1) for row in payload.get("faults", []))
    status.faults_last_batch = faults
    status.faults_total += faults
    agent = payload.get("agent") or {}
    status.outbox_depth = int(agent.get("outbox_depth") or 0)
    status.outbox_dropped = int(agent.get("outbox_dropped") or 0)
    status.events_dropped += int(payload.get("events_dropped") or 0)
    status.save()
