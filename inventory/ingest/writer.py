"""Write agent batches into PostgreSQL: once each, whatever the broker redelivers.

Batch ids go into IngestedBatch in the same transaction as the rows; a batch seen before
inserts nothing (its id is looked up first, and a claim lost to another writer meanwhile
undoes the group, which is written again without it). A batch id is its host's own: the same
id again for the same host is a redelivery, for another host a clash, refused with that
reason (dropping it as a redelivery would let one host silence another's batch by its id).
Many batches (from many hosts) share one transaction, so the fixed cost of a write is paid
once per group, not per host interval.
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
from itertools import repeat

from django.conf import settings
from django.db import connection, transaction

from inventory.analytics.fragmentation import index_from_columns
from inventory.ingest import samples
from inventory.ingest.events import events_of, faults_of
from inventory.ingest.maps import HostMaps
from inventory.ingest.statuses import update_statuses
from inventory.ingest.values import json_parameter, timestamp
from inventory.models import (
    CollectorFault,
    Event,
    Gpu,
    Host,
)
from inventory.models.fleet import HOST_NAME_PATTERN
from inventory.timeseries import partitions
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
    written_before = _written_before(payloads)
    _ensure_partitions(payloads, window)
    while True:
        group = _Group(payloads, window, hosts, written_before)
        try:
            with transaction.atomic():
                group.write()
        except _ClaimedMeanwhile:
            # Another worker wrote some of these batches since they were looked up (the same
            # redelivery taken twice, or a clash): undone, and written again knowing for
            # which host each was written.
            written_before = _written_before(payloads)
            continue
        return group.results


class _ClaimedMeanwhile(Exception):
    pass


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


def _written_before(payloads: list[dict]) -> dict[str, int]:
    """The group's batch ids already written, with the host each was written for."""
    keys = {_uuid_text(p.get("batch_id")) for p in payloads if isinstance(p, dict)} - {None}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT batch_id::text, host_id FROM inventory_ingestedbatch "
            "WHERE batch_id IN (SELECT json_array_elements_text(%s::json)::uuid)",
            [json_parameter(sorted(keys))],
        )
        return dict(cursor.fetchall())


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
        partitions.ensure_partitions(timestamp(min(times)), timestamp(max(times)))


@dataclass
class _Group:
    """One transaction's write of a group of batches."""

    payloads: list[dict]
    window: Window
    hosts: dict[str, Host]
    written_before: dict[str, int]
    results: list[IngestResult | BatchRejected | None] = field(init=False)
    known: dict[str, tuple[int, int]] = field(init=False)

    def write(self) -> None:
        self.results = [None] * len(self.payloads)
        maps_of = HostMaps.load_for(set(self.hosts.values()))
        self.known = _known_cards(self.payloads, maps_of)  # with the cards this write creates
        checked = self._check_bringing_new_cards(maps_of)
        self._rediscover_mig(maps_of, checked)
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
            raise _ClaimedMeanwhile(f"{len(accepted) - len(fresh)} batch ids claimed meanwhile")
        events, faults = [], []
        for payload in payloads:
            host = self.hosts[payload["host"]]
            events.extend(events_of(payload, host, maps_of[host.pk]))
            faults.extend(faults_of(payload, host, maps_of[host.pk]))
        samples.write(
            *tables.each_table(),
            {
                (
                    timestamp(p["interval_end"]),
                    self.hosts[p["host"]].pk,
                    uuid.UUID(str(p["batch_id"])),
                )
                for p in payloads
            },
        )
        Event.objects.bulk_create(events, ignore_conflicts=True)
        CollectorFault.objects.bulk_create(faults)
        update_statuses(payloads, self.hosts)
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
            host = self.hosts[payload["host"]]
            key = _uuid_text(payload["batch_id"])
            if self.written_before.get(key, host.pk) != host.pk:
                raise BatchRejected("batch_id_clash", "other_host", "batch_id", batch_id=key)
            _check_cards(payload, host, self.known)
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

    def _rediscover_mig(self, maps_of: dict, checked: dict) -> None:
        """MIG layouts a batch reports differently are written before the COPY as well, so
        its process rows name the card's MIG devices as they are now."""
        for position, payload in enumerate(self.payloads):
            name = payload.get("host") if isinstance(payload, dict) else None
            host = self.hosts.get(name) if isinstance(name, str) else None
            if host is None or not maps_of[host.pk].may_change_mig(payload):
                continue
            if position not in checked:
                checked[position] = self._check(payload)
            if isinstance(checked[position], BatchRejected):
                continue
            if _uuid_text(payload["batch_id"]) not in self.written_before:
                maps_of[host.pk].rediscover_mig(payload, timestamp(payload["interval_end"]))

    def _process_rows(self, maps_of, checked, tables: "_Rows", accepted) -> Iterator[tuple]:
        """Each batch checked, in order, its process rows handed to the COPY and its other
        rows kept in `tables`."""
        for position, payload in enumerate(self.payloads):
            outcome = checked[position] if position in checked else self._check(payload)
            if isinstance(outcome, BatchRejected):
                self.results[position] = outcome
                continue
            key = _uuid_text(payload["batch_id"])
            host = self.hosts[payload["host"]]
            if key in accepted and accepted[key][1].payload["host"] != host.name:
                # Two hosts' batches with one id in a group: the first one's, as if written.
                self.results[position] = BatchRejected(
                    "batch_id_clash", "other_host", "batch_id", batch_id=key
                )
                continue
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
            maps = maps_of[host.pk]
            count, rows = _collect_samples(batch, maps, timestamp(payload["interval_end"]), tables)
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


def _known_cards(payloads: list[dict], maps_of: dict[int, HostMaps]) -> dict[str, tuple[int, int]]:
    """(host id, index) of every card the group names, by UUID: the group's hosts' own cards
    from their maps, the others (another host's card, or a new one) looked up. In the steady
    state a batch names only its host's cards, and nothing is looked up: a lookup of every
    card named scanned the whole inventory's cards for each group."""
    known = {
        uuid_: (host_id, index)
        for host_id, maps in maps_of.items()
        for uuid_, index in maps.card_indexes().items()
    }
    named = {
        card.get("uuid")
        for payload in payloads
        if isinstance(payload, dict) and isinstance(payload.get("cards"), list)
        for card in payload["cards"]
        if isinstance(card, dict) and isinstance(card.get("uuid"), str)
    }
    # Each distinct UUID matched once: a group names the same few cards hundreds of times.
    uuids = [uuid_ for uuid_ in named - known.keys() if CARD_UUID.fullmatch(uuid_)]
    if not uuids:
        return known
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT uuid, host_id, index FROM {Gpu._meta.db_table} "
            "WHERE uuid IN (SELECT json_array_elements_text(%s::json))",
            [json_parameter(uuids)],
        )
        known.update((uuid_, (host_id, index)) for uuid_, host_id, index in cursor.fetchall())
    return known


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
    # Only the id and name: a group names up to hundreds of hosts, whose other fields nothing
    # here reads (making whole instances was two thirds of the lookup).
    hosts = Host.objects.filter(name__in=names).only("id", "name")
    return {host.name: host for host in hosts}


def _claim(payloads: list[dict], hosts: dict[str, Host], rows: dict[str, int]) -> set[str]:
    """Record the batch ids; return those not seen before. In the order of their ids, so two
    writers that hold some of the same batches take their locks in one order. The claims
    are read as jsonb, parsed once, not once a field (a quarter of the time)."""
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
            FROM jsonb_array_elements(%s::jsonb) AS x
            ON CONFLICT (batch_id) DO NOTHING
            RETURNING batch_id
            """,
            [json_parameter(claims)],
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


# A card row's figures, in CARD_COLUMNS' order (total_bytes to util_memory_max).
_CARD_FIGURE_KEYS = ("total_bytes", "used_bytes_max", "used_bytes_last", "reserved_bytes_last",
                     "free_bytes_min", "free_bytes_last", "util_gpu_max", "util_gpu_last",
                     "util_memory_max")  # fmt: skip
_CARD_FIGURES = operator.itemgetter(*_CARD_FIGURE_KEYS)


def _requests_and_window(latency: dict, interval_s: float) -> tuple[float | None, float | None]:
    """An interval's request count and the seconds it covers, or neither: a count is only a
    rate over the time it was counted in. An agent that does not say its window (before
    window_s) counted since its last flush, the batch's own interval."""
    count = latency.get("count")
    window_s = latency.get("window_s", interval_s)
    if count is None or not window_s or window_s <= 0:
        return None, None
    return count, window_s


def _collect_samples(
    batch: _Accepted, maps: HostMaps, end: dt.datetime, tables: "_Rows"
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
        requests, window_s = _requests_and_window(latency, interval_s)
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
                requests,
                window_s,
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
    columns: ProcessColumns, maps: HostMaps, end: dt.datetime, batch_id: uuid.UUID
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
