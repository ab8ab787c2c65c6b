"""Write agent batches into PostgreSQL: once each, whatever the broker redelivers.

Batch ids go into IngestedBatch in the same transaction as the rows; a batch seen before
inserts nothing (its id is looked up first, and a claim lost to another writer meanwhile
undoes the group, which is written again without it). Many batches (from many hosts) share
one transaction, so the fixed cost of a write is paid once per group, not per host interval.
Rows are COPYed straight into the partitioned sample tables (inventory.ingest.samples);
the rollups follow from the minutes marked dirty (inventory.timeseries.rollups).
"""

import datetime as dt
import logging
import operator
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat

import orjson
from django.conf import settings
from django.db import connection, transaction

from console.core.auditing import Action, snapshot
from console.core.auditing.changes import record as audit_record
from inventory.analytics.fragmentation import index_from_columns
from inventory.analytics.oom_triage import triage_snapshot
from inventory.ingest import samples
from inventory.models import (
    CollectorFault,
    CollectorStatus,
    Deployment,
    Event,
    Gpu,
    Host,
    MigSlice,
)
from inventory.models.fleet import HOST_NAME_PATTERN
from inventory.timeseries import partitions
from inventory.wire import sequences
from inventory.wire.columns import ProcessColumns, rows_of_wire
from inventory.wire.schema import (
    CANONICAL_UUID,
    CARD_UUID,
    COLUMNAR_SCHEMA,
    MAX_LIST,
    BatchRejected,
    Window,
    check_batch,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestResult:
    batch_id: str
    duplicate: bool
    rows: int = 0
    events: int = 0


def _ts(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def _json(value) -> str:
    """A statement's list of values as one JSON parameter: psycopg quotes an array's elements
    one by one, in Python, which for a group's hundreds cost more than the statement."""
    return orjson.dumps(value).decode()


def acceptance_window(now: float | None = None) -> Window:
    """Batches older than the raw samples kept, or from the future, are refused."""
    return Window.around(
        time.time() if now is None else now,
        retention_s=settings.TELEMETRY_RAW_RETENTION_DAYS * 86400,
        skew_s=settings.INGEST_CLOCK_SKEW_S,
    )


def ingest_batch(payload: dict) -> IngestResult:
    """Write one batch; BatchRejected when it can never be written."""
    result = ingest_batches([payload])[0]
    if isinstance(result, BatchRejected):
        raise result
    return result


def ingest_batches(
    payloads: list[dict], *, now: float | None = None
) -> list[IngestResult | BatchRejected]:
    """Write a group of batches in one transaction; one result per payload, in order.

    Each payload is checked whole (inventory.wire.schema) just before its process
    rows go into the group's COPY, so PostgreSQL takes in one batch's rows while the next is
    checked; one that can never be written gets its BatchRejected in the results, writes
    nothing and does not stop the others. `now` places the window of accepted timestamps
    (tests and history replays).

    Database errors propagate and roll the whole group back: retrying the
    same group later writes each batch exactly once.
    """
    window = acceptance_window(now)
    hosts = _hosts_by_name(payloads)
    cards = _known_cards(payloads)
    written_before = _written_before(payloads)
    _ensure_partitions(payloads, window)
    while True:
        group = _Group(payloads, window, hosts, cards, written_before)
        try:
            with transaction.atomic():
                group.write()
        except _ClaimedMeanwhile as raced:
            # Another worker wrote some of these batches since they were looked up (the same
            # redelivery taken twice): undone, and written again without them.
            written_before |= raced.batch_ids
            continue
        return group.results


class _ClaimedMeanwhile(Exception):
    def __init__(self, batch_ids: set[str]) -> None:
        super().__init__(f"{len(batch_ids)} batch ids claimed by another writer")
        self.batch_ids = batch_ids


def _uuid_text(value) -> str | None:
    """A batch or sampler id as the database spells it back (and can read): the check lets in
    any spelling uuid.UUID reads, "urn:uuid:..." and hyphens anywhere included."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    if CANONICAL_UUID.fullmatch(value):
        return value
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def _written_before(payloads: list[dict]) -> set[str]:
    """The group's batch ids already written: a redelivery, or an agent's resend."""
    keys = {_uuid_text(p.get("batch_id")) for p in payloads if isinstance(p, dict)} - {None}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT batch_id::text FROM inventory_ingestedbatch "
            "WHERE batch_id IN (SELECT json_array_elements_text(%s::json)::uuid)",
            [_json(sorted(keys))],
        )
        return {row[0] for row in cursor.fetchall()}


def _ensure_partitions(payloads: list[dict], window: Window) -> None:
    """The partitions the group's rows can go to, made before its transaction (each in its
    own, so a failed group cannot undo them): over every interval the check can let in."""
    times = [
        value
        for p in payloads
        if isinstance(p, dict)
        for value in (p.get("interval_start"), p.get("interval_end"))
        if isinstance(value, int | float)
        and not isinstance(value, bool)
        and window.oldest <= value <= window.newest
    ]
    if times:
        partitions.ensure_partitions(_ts(min(times)), _ts(max(times)))


@dataclass
class _Group:
    """One transaction's write of a group of batches."""

    payloads: list[dict]
    window: Window
    hosts: dict[str, Host]
    cards: dict[str, tuple[int, int]]
    written_before: set[str]
    results: list[IngestResult | BatchRejected | None] = field(init=False)
    known: dict[str, tuple[int, int]] = field(init=False)

    def write(self) -> None:
        self.results = [None] * len(self.payloads)
        self.known = dict(self.cards)  # with the cards this write creates
        maps_of = _Maps.load_for(set(self.hosts.values()))
        checked = self._check_bringing_new_cards(maps_of)
        tables = _Rows()
        accepted: dict[str, tuple[int, _Accepted, int]] = {}
        samples.write_processes(self._process_rows(maps_of, checked, tables, accepted))
        if not accepted:
            return
        payloads = [batch.payload for _, batch, _ in accepted.values()]
        fresh = _claim(
            payloads, self.hosts, {key: count for key, (_, _, count) in accepted.items()}
        )
        if len(fresh) < len(accepted):
            raise _ClaimedMeanwhile(set(accepted) - fresh)
        events, faults = [], []
        for payload in payloads:
            host = self.hosts[payload["host"]]
            events.extend(_events(payload, host, maps_of[host.pk]))
            faults.extend(_faults(payload, host, maps_of[host.pk]))
        samples.write(*tables.each_table(), {_ts(p["interval_end"]) for p in payloads})
        Event.objects.bulk_create(events, ignore_conflicts=True)
        CollectorFault.objects.bulk_create(faults)
        _update_statuses(payloads, self.hosts)
        events_per_batch: dict[str, int] = {}
        for event in events:
            key = _uuid_text(str(event.batch_id))
            events_per_batch[key] = events_per_batch.get(key, 0) + 1
        for key, (position, _, count) in accepted.items():
            self.results[position] = IngestResult(key, False, count, events_per_batch.get(key, 0))

    def _check(self, payload: dict) -> ProcessColumns | BatchRejected:
        try:
            columns = check_batch(payload, self.window)
            if payload["host"] not in self.hosts:
                raise BatchRejected(
                    "unknown_host", "unknown_host", "host", host=repr(payload["host"])
                )
            _check_cards(payload, self.hosts[payload["host"]], self.known)
        except BatchRejected as rejected:
            return rejected
        return columns

    def _check_bringing_new_cards(self, maps_of: dict) -> dict[int, ProcessColumns | BatchRejected]:
        """Batches naming a card the inventory does not hold are checked before the COPY,
        whose connection cannot look up or create cards meanwhile, and their cards created in
        turn: a later batch that puts another new card at the index of one just created is
        refused as a replaced card, as it would be in a group of its own."""
        checked = {}
        for position, payload in enumerate(self.payloads):
            if not _names_a_new_card(payload, self.known):
                continue
            outcome = checked[position] = self._check(payload)
            if isinstance(outcome, BatchRejected):
                continue
            # A batch written before (a resend) creates nothing: its card may have been
            # removed from the inventory since, on purpose.
            if _uuid_text(payload["batch_id"]) not in self.written_before:
                host = self.hosts[payload["host"]]
                for gpu in maps_of[host.pk].discover(host, payload):
                    self.known[gpu.uuid] = (host.pk, gpu.index)
        return checked

    def _process_rows(self, maps_of, checked, tables: "_Rows", accepted) -> Iterator[tuple]:
        """Each batch checked, in order, its process rows handed to the COPY and its other
        rows kept in `tables`."""
        for position, payload in enumerate(self.payloads):
            outcome = checked[position] if position in checked else self._check(payload)
            if isinstance(outcome, BatchRejected):
                self.results[position] = outcome
                continue
            key = _uuid_text(payload["batch_id"])
            # The same batch twice in one group, or written before: a redelivery.
            if key in accepted or key in self.written_before:
                self.results[position] = IngestResult(key, duplicate=True)
                continue
            # A list sent as null is an empty list from here on; process rows are read whole
            # only for an event's snapshot.
            lists = {name: payload.get(name) or [] for name in MAX_LIST}
            if payload["schema"] == COLUMNAR_SCHEMA:
                lists["processes"] = rows_of_wire(payload["processes"]) if lists["events"] else []
            batch = _Accepted({**payload, **lists}, outcome.one_per_process())
            maps = maps_of[self.hosts[payload["host"]].pk]
            count, rows = _collect_samples(batch, maps, _ts(payload["interval_end"]), tables)
            accepted[key] = (position, batch, count)
            yield from rows


def _names_a_new_card(payload, known: dict[str, tuple[int, int]]) -> bool:
    cards = payload.get("cards") if isinstance(payload, dict) else None
    return isinstance(cards, list) and any(
        isinstance(card, dict)
        and isinstance(card.get("uuid"), str)
        and card["uuid"]
        and card["uuid"] not in known
        for card in cards
    )


@dataclass(frozen=True)
class _Accepted:
    """A batch that passed its check, with its process rows as columns, one per process."""

    payload: dict
    processes: ProcessColumns


def _known_cards(payloads: list[dict]) -> dict[str, tuple[int, int]]:
    """(host id, index) of every card the group names, by UUID."""
    named = {
        card.get("uuid")
        for payload in payloads
        if isinstance(payload, dict) and isinstance(payload.get("cards"), list)
        for card in payload["cards"]
        if isinstance(card, dict) and isinstance(card.get("uuid"), str)
    }
    # Each distinct UUID matched once: a group names the same few cards hundreds of times.
    uuids = [uuid_ for uuid_ in named if CARD_UUID.fullmatch(uuid_)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT uuid, host_id, index FROM {Gpu._meta.db_table} "
            "WHERE uuid IN (SELECT json_array_elements_text(%s::json))",
            [_json(uuids)],
        )
        return {uuid_: (host_id, index) for uuid_, host_id, index in cursor.fetchall()}


def _check_cards(payload: dict, host: Host, known: dict[str, tuple[int, int]]) -> None:
    """A card is a host's by its UUID: another host's card, or a new UUID at a known index (a
    replaced card, or a forged batch), is for a person to settle in the inventory."""
    taken = None
    for position, card in enumerate(payload.get("cards") or []):
        where = known.get(card.get("uuid"))
        if where is not None and where != (host.pk, card["index"]):
            raise BatchRejected(
                "card_conflict", "other_host", f"cards[{position}].uuid",
                uuid=card["uuid"], index=where[1], host_id=where[0],
            )  # fmt: skip
        if where is None and card.get("uuid"):
            if taken is None:
                taken = dict(host.gpus.values_list("index", "uuid"))
            # Another writer may have created this very card since `known` was read.
            if card["index"] in taken and taken[card["index"]] != card["uuid"]:
                raise BatchRejected(
                    "card_conflict", "replaced", f"cards[{position}].uuid",
                    index=card["index"], known=taken[card["index"]], uuid=card["uuid"],
                )  # fmt: skip


def _hosts_by_name(payloads: list[dict]) -> dict[str, Host]:
    # Only what could be a host's name is looked up: the check refuses the rest (a NUL byte,
    # a list), which the database could not even compare.
    named = {p["host"] for p in payloads if isinstance(p, dict) and isinstance(p.get("host"), str)}
    names = [name for name in named if HOST_NAME_PATTERN.fullmatch(name)]
    return {host.name: host for host in Host.objects.filter(name__in=names)}


def _claim(payloads: list[dict], hosts: dict[str, Host], rows: dict[str, int]) -> set[str]:
    """Record the batch ids; return those not seen before. In the order of their ids, so two
    writers that hold some of the same batches take their locks in one order."""
    claims = sorted(
        (
            _uuid_text(p["batch_id"]),
            hosts[p["host"]].pk,
            _uuid_text(p["sampler_id"]),
            int(p["seq"]),
            float(p["interval_start"]),
            float(p["interval_end"]),
            rows[_uuid_text(p["batch_id"])],
        )
        for p in payloads
    )
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO inventory_ingestedbatch
                (batch_id, host_id, sampler_id, seq, interval_start, interval_end, received_at,
                 rows)
            SELECT (x->>0)::uuid, (x->>1)::bigint, (x->>2)::uuid, (x->>3)::bigint,
                   to_timestamp((x->>4)::float8), to_timestamp((x->>5)::float8), now(),
                   (x->>6)::int
            FROM json_array_elements(%s::json) AS x
            ON CONFLICT (batch_id) DO NOTHING
            RETURNING batch_id
            """,
            [_json(claims)],
        )
        return {str(row[0]) for row in cursor.fetchall()}


@dataclass
class _Rows:
    """A group's card, engine and MIG device rows, kept while its process rows go into their
    COPY."""

    cards: list[tuple] = field(default_factory=list)
    engines: list[tuple] = field(default_factory=list)
    migs: list[tuple] = field(default_factory=list)

    def each_table(self) -> list[list[tuple] | None]:
        """Each table's rows, None for a table without any."""
        return [rows or None for rows in (self.cards, self.engines, self.migs)]


@dataclass
class _Maps:
    """Card, MIG device and deployment ids of one host, by the keys a batch carries."""

    gpu_by_index: dict[int, int]
    gpu_by_uuid: dict[str, int]
    mig_by_uuid: dict[str, int]
    deployments: set[int]

    @classmethod
    def load_for(cls, hosts: set[Host]) -> dict[int, "_Maps"]:
        """The maps of every host of a group, in one statement whatever the group's size."""
        maps = {host.pk: cls({}, {}, {}, set()) for host in hosts}
        gpu, mig, deployment = (model._meta.db_table for model in (Gpu, MigSlice, Deployment))
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                SELECT 'gpu', id, host_id, index, uuid FROM {gpu} WHERE host_id = ANY(%(hosts)s)
                UNION ALL
                SELECT 'mig', m.id, g.host_id, NULL, m.uuid FROM {mig} m JOIN {gpu} g
                    ON g.id = m.gpu_id WHERE g.host_id = ANY(%(hosts)s) AND m.uuid <> ''
                UNION ALL
                SELECT 'deployment', id, host_id, NULL, NULL FROM {deployment}
                    WHERE host_id = ANY(%(hosts)s)
                """,
                {"hosts": sorted(maps)},
            )
            for kind, pk, host_id, index, uuid_ in cursor.fetchall():
                if kind == "gpu":
                    maps[host_id].gpu_by_index[index] = pk
                    maps[host_id].gpu_by_uuid[uuid_] = pk
                elif kind == "mig":
                    maps[host_id].mig_by_uuid[uuid_] = pk
                else:
                    maps[host_id].deployments.add(pk)
        return maps

    def discover(self, host: Host, payload: dict) -> list[Gpu]:
        """Create the batch's cards the host does not have yet; return them."""
        created = []
        for card in payload.get("cards", []):
            if card.get("uuid") and card["uuid"] not in self.gpu_by_uuid:
                gpu = _discover_card(host, card)
                self.gpu_by_uuid[gpu.uuid] = gpu.pk
                self.gpu_by_index[gpu.index] = gpu.pk
                created.append(gpu)
        return created

    def gpu_id(self, row: dict) -> int | None:
        uuid_ = row.get("card_uuid") or row.get("uuid")
        if uuid_ and uuid_ in self.gpu_by_uuid:
            return self.gpu_by_uuid[uuid_]
        index = row.get("card_index", row.get("index"))
        return self.gpu_by_index.get(index)

    def deployment_ids(self, raws: list) -> list[int | None]:
        """deployment_id of each, most by one dictionary lookup: ids come as the text of a
        number (what the plan sent), and only an odd one (" 12", "012") needs parsing."""
        found = list(map(self.deployment_by_text.get, raws))
        if found.count(None) != raws.count(None):
            found = [
                pk if pk is not None else self.deployment_id(raw)
                for pk, raw in zip(found, raws, strict=True)
            ]
        return found

    @cached_property
    def deployment_by_text(self) -> dict[str, int]:
        return {str(pk): pk for pk in self.deployments}

    def deployment_id(self, raw) -> int | None:
        """The host's deployment a batch names (by its id, as text), or None."""
        if raw is None:
            return None
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
        action=Action.GPU_DISCOVER,
        obj=gpu,
        before=None,
        after=snapshot(gpu),
        host=host,
        comment="first seen in telemetry",
    )
    return gpu


# A card row's figures, in CARD_COLUMNS' order (total_bytes to util_memory_max).
_CARD_FIGURE_KEYS = ("total_bytes", "used_bytes_max", "used_bytes_last", "reserved_bytes_last",
                     "free_bytes_min", "free_bytes_last", "util_gpu_max", "util_gpu_last",
                     "util_memory_max")  # fmt: skip
_CARD_FIGURES = operator.itemgetter(*_CARD_FIGURE_KEYS)


def _collect_samples(
    batch: _Accepted, maps: "_Maps", end: dt.datetime, tables: "_Rows"
) -> tuple[int, Iterable[tuple]]:
    """The batch's rows: its card, engine and MIG rows added to `tables`; how many rows in
    all, and its process rows."""
    payload = batch.payload
    batch_id = uuid.UUID(str(payload["batch_id"]))
    interval_s = max(0.0, payload["interval_end"] - payload["interval_start"])
    by_uuid = maps.gpu_by_uuid
    processes, process_count, card_frag = _process_rows(batch.processes, maps, end, batch_id)
    card_rows = []
    for card in payload.get("cards", []):
        gpu_id = by_uuid.get(card.get("uuid")) or maps.gpu_id(card)
        if gpu_id is None:
            continue
        try:
            figures = _CARD_FIGURES(card)
        except KeyError:  # a figure the agent could not read is left out
            figures = tuple(map(card.get, _CARD_FIGURE_KEYS))
        card_rows.append(
            (
                gpu_id,
                end,
                batch_id,
                interval_s,
                card.get("samples") or 0,
                bool(card.get("lost")),
                *figures,
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
                row.get("kv_pool_tokens"),
                row.get("kv_pool_bytes"),
                row.get("memory_fraction"),
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
    tables.cards.extend(card_rows)
    tables.engines.extend(engine_rows)
    tables.migs.extend(mig_rows)
    return len(card_rows) + process_count + len(engine_rows) + len(mig_rows), processes


def _process_rows(
    columns: ProcessColumns, maps: "_Maps", end: dt.datetime, batch_id: uuid.UUID
) -> tuple[Iterable[tuple], int, dict[int, float]]:
    """The batch's process sample rows, in PROCESS_COLUMNS' order, how many, and each card's
    highest fragmentation index. A row whose card the host does not have is left out."""
    gpu_ids = list(map(maps.gpu_by_uuid.get, columns.card_uuid))
    if None in gpu_ids:  # named by index only, or by a UUID the inventory does not hold
        by_index = maps.gpu_by_index
        gpu_ids = [
            gpu_id if gpu_id is not None else by_index.get(index)
            for gpu_id, index in zip(gpu_ids, columns.card_index, strict=True)
        ]
        if None in gpu_ids:
            kept = [position for position, gpu_id in enumerate(gpu_ids) if gpu_id is not None]
            columns = columns.take(kept)
            gpu_ids = [gpu_ids[position] for position in kept]
    frags = index_from_columns(
        columns.reserved_bytes,
        columns.allocated_bytes,
        columns.inactive_split_bytes,
        columns.largest_free_block_bytes,
    )
    card_frag: dict[int, float] = {}
    for gpu_id, frag in zip(gpu_ids, frags, strict=True):
        if frag is not None and frag >= card_frag.get(gpu_id, 0.0):
            card_frag[gpu_id] = frag
    kinds = columns.kind
    if None in kinds or "" in kinds:
        kinds = [kind or "compute" for kind in kinds]
    counts = columns.samples
    if None in counts:
        counts = [count or 0 for count in counts]
    count = len(gpu_ids)
    rows = zip(
        gpu_ids,
        repeat(end, count),
        repeat(batch_id, count),
        columns.pid,
        kinds,
        columns.name,
        maps.deployment_ids(columns.deployment_id),
        list(map(maps.mig_by_uuid.get, columns.mig_device_uuid)),
        columns.used_bytes_max,
        columns.used_bytes_last,
        counts,
        columns.reserved_bytes,
        columns.allocated_bytes,
        columns.inactive_split_bytes,
        columns.largest_free_block_bytes,
        frags,
        strict=True,
    )
    return rows, count, card_frag


def _one_row_per_process(processes: list[dict]) -> list[dict]:
    """The batch's process rows, one per card and PID, the MPS row kept where there are two
    (as ProcessColumns.one_per_process, for the rows an event's snapshot shows)."""
    rows: dict[tuple, dict] = {}
    for row in processes:
        key = (row.get("card_uuid") or row.get("card_index"), row["pid"])
        if key not in rows or row.get("kind") == "mps":
            rows[key] = row
    return list(rows.values())


def _process_snapshot(payload: dict, card_index, card_uuid) -> list[dict]:
    return [
        {
            "pid": row["pid"],
            "name": row.get("name"),
            "deployment_id": row.get("deployment_id"),
            "used_bytes": row.get("used_bytes_max"),
            "allocator": row.get("allocator"),
        }
        for row in _one_row_per_process(payload.get("processes", []))
        if row.get("card_uuid") == card_uuid or row.get("card_index") == card_index
    ]


_SNAPSHOT_FIGURES = ("requested_bytes", "free_bytes", "capacity_bytes", "mig_device_uuid")


def _event_snapshot(payload: dict, row: dict, detail: dict) -> dict:
    """The card's memory at the event: from the agent when it took one, else from the batch."""
    processes = detail.pop("processes", None)
    if processes is None:
        processes = _process_snapshot(payload, row.get("card_index"), row.get("card_uuid"))
    snapshot_ = {key: detail[key] for key in _SNAPSHOT_FIGURES if key in detail}
    card = next(
        (
            c
            for c in payload.get("cards", [])
            if c.get("uuid") == row.get("card_uuid") or c.get("index") == row.get("card_index")
        ),
        {},
    )
    snapshot_["card_total_bytes"] = card.get("total_bytes")
    snapshot_["card_reserved_bytes"] = card.get("reserved_bytes_last")
    snapshot_.setdefault("free_bytes", card.get("free_bytes_min"))
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


def _events(payload: dict, host: Host, maps: _Maps) -> list[Event]:
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
        cause = explanation = ""
        reason = {}
        if kind == Event.Kind.OOM:
            triage = triage_snapshot(snapshot_, detail.get("pid"))
            cause, explanation = triage.cause.value, triage.explanation
            reason = triage.reason.to_json()
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
                cause=cause,
                cause_explanation=explanation,
                cause_reason=reason,
                batch_id=payload["batch_id"],
                position=position,
            )
        )
    return events


def _faults(payload: dict, host: Host, maps: _Maps) -> list[CollectorFault]:
    return [
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
    ]


# The collector status fields a batch moves, with their SQL types.
_STATUS_FIELDS = {
    "sampler_id": "uuid",
    "last_seq": "bigint",
    "last_sample_at": "timestamptz",
    "last_batch_at": "timestamptz",
    "batches": "bigint",
    "missing_batches": "bigint",
    "sequences": "jsonb",
    "faults_last_batch": "int",
    "faults_total": "bigint",
    "outbox_depth": "int",
    "outbox_dropped": "bigint",
    "events_dropped": "bigint",
}


@dataclass
class _Status:
    """A host's collector status as a group moves it (the fields of CollectorStatus it
    writes)."""

    host_id: int
    sampler_id: uuid.UUID | None
    last_seq: int
    last_sample_at: dt.datetime | None
    last_batch_at: dt.datetime | None
    batches: int
    missing_batches: int
    sequences: dict
    faults_last_batch: int
    faults_total: int
    outbox_depth: int
    outbox_dropped: int
    events_dropped: int


def _update_statuses(payloads: list[dict], hosts: dict[str, Host]) -> None:
    """Fold the group's batches into each host's collector status: two statements in all."""
    host_ids = sorted({hosts[p["host"]].pk for p in payloads})
    statuses = _locked_statuses(host_ids)
    if len(statuses) < len(host_ids):  # a host's first batch
        CollectorStatus.objects.bulk_create(
            [CollectorStatus(host_id=pk) for pk in host_ids if pk not in statuses],
            ignore_conflicts=True,
        )
        statuses = _locked_statuses(host_ids)
    now = dt.datetime.now(tz=dt.UTC)
    for payload in sorted(payloads, key=lambda p: (str(p["sampler_id"]), int(p["seq"]))):
        _apply_to_status(statuses[hosts[payload["host"]].pk], payload)
    for status in statuses.values():
        status.last_batch_at = now
    # One UPDATE from one JSON document: bulk_update's CASE expressions cost more than the
    # write itself.
    columns = ", ".join(f"{name} = x.{name}" for name in _STATUS_FIELDS)
    types = ", ".join(f"{name} {kind}" for name, kind in _STATUS_FIELDS.items())
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE inventory_collectorstatus AS s SET {columns}
            FROM json_to_recordset(%s::json) AS x(host_id bigint, {types})
            WHERE s.host_id = x.host_id
            """,
            [_json([vars(status) for status in statuses.values()])],
        )
    _update_mps_servers(payloads, hosts)


def _locked_statuses(host_ids: list[int]) -> dict[int, _Status]:
    """The hosts' collector statuses, locked in host order, so that two workers never wait on
    each other in a cycle."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT host_id, {', '.join(_STATUS_FIELDS)} FROM inventory_collectorstatus "
            "WHERE host_id = ANY(%s::bigint[]) ORDER BY host_id FOR UPDATE",
            [host_ids],
        )
        statuses = {
            row[0]: _Status(host_id=row[0], **dict(zip(_STATUS_FIELDS, row[1:], strict=True)))
            for row in cursor.fetchall()
        }
    for status in statuses.values():  # Django reads jsonb as text, for JSONField to decode
        status.sequences = orjson.loads(status.sequences)
    return statuses


def _update_mps_servers(payloads: list[dict], hosts: dict[str, Host]) -> None:
    """The live MPS state of each host whose agent reported one: the latest batch's."""
    latest: dict[int, dict] = {}
    for payload in payloads:
        mps = (payload.get("agent") or {}).get("mps")
        pk = hosts[payload["host"]].pk
        if isinstance(mps, list) and (
            pk not in latest or payload["interval_end"] > latest[pk]["interval_end"]
        ):
            latest[pk] = payload
    for pk, payload in sorted(latest.items()):
        CollectorStatus.objects.filter(host_id=pk).update(
            mps_servers=payload["agent"]["mps"], mps_seen_at=_ts(payload["interval_end"])
        )


def _apply_to_status(status: _Status, payload: dict) -> None:
    sampler_id = uuid.UUID(str(payload["sampler_id"]))
    seq = int(payload["seq"])
    end = _ts(payload["interval_end"])
    same_sampler = status.sampler_id == sampler_id
    sequences.record(status.sequences, str(sampler_id), seq, payload["interval_end"])
    status.missing_batches = sequences.missing(status.sequences)
    newer = status.last_sample_at is None or end >= status.last_sample_at
    if (not same_sampler and newer) or (same_sampler and seq > status.last_seq):
        # A late batch of an earlier sampler (the agent before its restart) moves nothing.
        status.sampler_id, status.last_seq = sampler_id, seq
    if status.last_sample_at is None or end > status.last_sample_at:
        status.last_sample_at = end
    status.batches += 1
    faults = sum(int(row.get("count") or 1) for row in payload.get("faults", []))
    status.faults_last_batch = faults
    status.faults_total += faults
    agent = payload.get("agent") or {}
    status.outbox_depth = int(agent.get("outbox_depth") or 0)
    status.outbox_dropped = int(agent.get("outbox_dropped") or 0)
    status.events_dropped += int(payload.get("events_dropped") or 0)
