"""The batch a host agent publishes ("gpu-telemetry-batch/1"), and the check ingest runs on it.

Ingest checks a batch whole before it writes anything of it: every value must fit its column
(smallint, integer, bigint, real) and make physical sense (memory never negative, used never
above the card's total, a utilisation between 0 and 100), timestamps must lie between the
oldest raw sample still kept and a few minutes into the future, strings are bounded and free
of NUL bytes, and each card and each (card, PID) appears once. A batch that fails is rejected
with a reason code, the path of the offending value and a message; it is never retried, since
it can never be written as it is.

Fields the check does not know are left alone (a newer agent may send more); fields it knows
must have the type and range below or be null where null is allowed.
"""

from __future__ import annotations

import contextlib
import math
import operator
import re
import uuid
from dataclasses import dataclass
from typing import Any

from inventory.wire.columns import ProcessColumns, columns_of, rows_of_wire

SCHEMA = "gpu-telemetry-batch/1"
# The same batch with its process rows as columns (inventory.wire.columns): what
# agents publish.
COLUMNAR_SCHEMA = "gpu-telemetry-batch/2"
SCHEMAS = (SCHEMA, COLUMNAR_SCHEMA)

SMALLINT = 2**15 - 1
INTEGER = 2**31 - 1
BIGINT = 2**63 - 1
# Far above any card (288 GB today), far below what would overflow a sum of a fleet's cards.
MAX_BYTES = 2**50
# NVML's used may run a little over total while a card is being reset; more is a broken reader.
USED_OVER_TOTAL_TOLERANCE = 0.01
MAX_STRING = 256
MAX_LIST = {
    "cards": 64,
    "mig_devices": 64 * 7,
    "processes": 8192,
    "engines": 512,
    "events": 1000,
    "faults": 1000,
}


# NVML's forms: "GPU-<uuid>" for a card, "MIG-<uuid>" (or, before driver 470,
# "MIG-GPU-<uuid>/<gi>/<ci>") for a MIG device.
# A UUID as uuid.UUID spells it: most batch and sampler ids, told apart without parsing them.
CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
CARD_UUID = re.compile(r"GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
MIG_UUID = re.compile(r"MIG-[0-9A-Za-z/-]{8,80}")


def gettext_noop(message: str) -> str:
    """Marks a message for makemessages (it looks for this name); this package imports no
    Django nor console, so the console translates these where it shows them."""
    return message


# Why a batch was refused, by "<reason code>.<message>": English str.format templates. The
# console registers them as reason codes (REASON_PREFIX + key) and reads them in the reader's
# language; their parameters are plain JSON values, a value's kind a nested reason (KINDS).
MESSAGES = {
    "not_an_object.not_an_object": gettext_noop("a batch is a JSON object, not {kind}"),
    "unknown_schema.unknown": gettext_noop("schema {schema}, expected {expected}"),
    "bad_interval.end_before_start": gettext_noop("interval_end is before interval_start"),
    "bad_uuid.not_mig": gettext_noop("{value} is no NVML MIG UUID"),
    "bad_uuid.not_card": gettext_noop("{value} is no NVML card UUID"),
    "bad_uuid.expected_uuid": gettext_noop("expected a UUID, got {kind}"),
    "bad_uuid.not_uuid": gettext_noop("{value} is not a UUID"),
    "bad_type.expected_list": gettext_noop("expected a list, got {kind}"),
    "bad_type.expected_object": gettext_noop("expected an object, got {kind}"),
    "bad_type.expected_boolean": gettext_noop("expected true or false, got {kind}"),
    "bad_type.expected_number": gettext_noop("expected a number, got {kind}"),
    "bad_type.expected_whole": gettext_noop("expected a whole number, got {value}"),
    "bad_type.expected_text": gettext_noop("expected text, got {kind}"),
    "bad_type.unexpected": gettext_noop("unexpected {kind}"),
    "too_many.rows": gettext_noop("{count} rows, at most {limit}"),
    "too_many.mps_servers": gettext_noop("{count} MPS servers, at most {limit}"),
    "missing.required": gettext_noop("required"),
    "missing.card": gettext_noop("card_uuid or card_index is required"),
    "not_finite.not_finite": gettext_noop("{value} is not a finite number"),
    "out_of_range.outside": gettext_noop("{value} is outside [{low:g}, {high:g}]"),
    "out_of_range.digits_outside": gettext_noop(
        "a number of {digits} digits is outside [{low:g}, {high:g}]"
    ),
    "out_of_range.beyond_64_bits": gettext_noop("a number beyond 64 bits"),
    "bad_length.between": gettext_noop("{length} characters, expected {low}-{high}"),
    "bad_length.at_most": gettext_noop("{length} characters, at most {limit}"),
    "bad_length.column": gettext_noop("{length} values, expected one a row: {expected}"),
    "nul_byte.nul_byte": gettext_noop("text holds a NUL byte"),
    "too_deep.levels": gettext_noop("nested more than {limit} levels"),
    "duplicate.card_index": gettext_noop("card index {index} twice"),
    "duplicate.card_uuid": gettext_noop("card {uuid} twice"),
    "duplicate.pid": gettext_noop("PID {pid} twice on card {card}"),
    "over_total.over_total": gettext_noop("{key} {value} is above the total of {total} bytes"),
    "too_old.too_old": gettext_noop("older than the raw samples still kept"),
    "in_the_future.in_the_future": gettext_noop("later than now plus the clock skew allowed"),
    # Refused before or after the check (inventory.timeseries: the worker, signatures, ingest).
    "undecodable.error": gettext_noop("{error}"),
    "too_large.bytes": gettext_noop("{size} bytes, at most {limit}"),
    "too_large.cut": gettext_noop("only the first MiB of this message was kept"),
    "not_json.error": gettext_noop("{error}"),
    "write_failed.error": gettext_noop("{error}"),
    "unsigned.unsigned": gettext_noop("{host} signs its batches; this one carries no {header}"),
    "bad_signature.bad_signature": gettext_noop(
        "the signature does not match {host}'s secret: another sender, an old secret, or a "
        "body changed on its way"
    ),
    "bad_signature.no_secret": gettext_noop(
        "{host} holds no secret, yet this batch is signed: with a key the console never "
        "issued for it"
    ),
    "batch_id_clash.other_host": gettext_noop(
        "batch id {batch_id} was written for another host already: batch ids are each host's own"
    ),
    "unknown_host.unknown_host": gettext_noop(
        "unknown host {host}: register it in the inventory first"
    ),
    "card_conflict.other_host": gettext_noop(
        "{uuid} is card {index} of host id {host_id} in the inventory"
    ),
    "card_conflict.replaced": gettext_noop(
        "card {index} is {known} in the inventory, not {uuid}: a replaced card is "
        "re-registered in the admin"
    ),
    # What a refused value was (``kind``).
    "kind.object": gettext_noop("an object"),
    "kind.list": gettext_noop("a list"),
    "kind.text": gettext_noop("text"),
    "kind.boolean": gettext_noop("a boolean"),
    "kind.null": gettext_noop("null"),
    "kind.integer": gettext_noop("int"),
    "kind.float": gettext_noop("float"),
}
REASON_PREFIX = "batch_rejected."


class BatchRejected(Exception):
    """The batch can never be written as it is; retrying would not help.

    ``code`` is the machine-readable reason (``bad_type``: what alerts and scripts match on);
    ``says`` which of its MESSAGES explains it, filled with ``params``.
    """

    def __init__(self, code: str, says: str, path: str = "", **params: Any) -> None:
        self.code = code
        self.says = f"{code}.{says}"
        self.params = params
        self.path = path
        super().__init__(f"{path}: {self.message}" if path else self.message)

    @property
    def message(self) -> str:
        """In English."""
        params = {
            name: MESSAGES[value["code"].removeprefix(REASON_PREFIX)]
            if isinstance(value, dict)
            else value
            for name, value in self.params.items()
        }
        return MESSAGES[self.says].format(**params)

    def reason(self) -> dict:
        """As a stored reason (inventory.analytics.reasons' JSON form): code and parameters."""
        return {"code": REASON_PREFIX + self.says, "params": self.params}


@dataclass(frozen=True)
class Window:
    """The timestamps ingest accepts: none older than raw retention, none from the future."""

    oldest: float
    newest: float

    @classmethod
    def around(cls, now: float, *, retention_s: float, skew_s: float) -> Window:
        return cls(now - retention_s, now + skew_s)


@dataclass(frozen=True)
class _Field:
    kind: type
    low: float = 0
    high: float = BIGINT
    required: bool = False


# A row's fields flattened for the hot loop: (name, kind, low, high, required, field).
_Spec = tuple[tuple[str, type, float, float, bool, _Field], ...]


def _spec(fields: dict[str, _Field]) -> _Spec:
    return tuple((name, f.kind, f.low, f.high, f.required, f) for name, f in fields.items())


_BYTES = _Field(int, 0, MAX_BYTES)
_COUNT = _Field(int, 0, SMALLINT)
_TOKENS = _Field(int, 0, MAX_BYTES)  # a KV pool in tokens (bigint column)
_PERCENT = _Field(int, 0, 100)
_FRACTION = _Field(float, 0.0, 1.0)
_GAUGE = _Field(float, 0.0, 1e9)
_SECONDS = _Field(float, 0.0, 1e6)
_TEXT = _Field(str, 0, MAX_STRING)
_FLAG = _Field(bool)

_CARD = _spec(
    {
        "index": _Field(int, 0, 63, required=True),
        "uuid": _Field(str, 0, 64),
        "name": _Field(str, 0, 100),
        "lost": _FLAG,
        "samples": _COUNT,
        "total_bytes": _BYTES,
        "used_bytes_max": _BYTES,
        "used_bytes_last": _BYTES,
        "reserved_bytes_max": _BYTES,
        "reserved_bytes_last": _BYTES,
        "free_bytes_min": _BYTES,
        "free_bytes_max": _BYTES,
        "free_bytes_last": _BYTES,
        "util_gpu_max": _PERCENT,
        "util_gpu_last": _PERCENT,
        "util_memory_max": _PERCENT,
        "util_memory_last": _PERCENT,
        # NVML_DEVICE_MIG_DISABLE / _ENABLE now and after the next reset
        "mig_current": _Field(int, 0, 1),
        "mig_pending": _Field(int, 0, 1),
        "compute_mode": _Field(int, 0, 3),  # NVML_COMPUTEMODE_*
    }
)
_ALLOCATOR = _spec(
    {
        "reserved_bytes": _BYTES,
        "allocated_bytes": _BYTES,
        "inactive_split_bytes": _BYTES,
        "largest_free_block_bytes": _BYTES,
        "fragmentation_max": _FRACTION,
        "reserved_bytes_max": _BYTES,  # the interval's peaks (allocator exporter scrapes)
        "allocated_bytes_max": _BYTES,
    }
)
_PROCESS = _spec(
    {
        "card_index": _Field(int, 0, 63),
        "card_uuid": _Field(str, 0, 64),
        "pid": _Field(int, 0, INTEGER, required=True),
        "kind": _Field(str, 0, 8),
        "name": _TEXT,
        # The plan's deployment id, echoed as text; ingest keeps it only where it names one of the
        # host's deployments.
        "deployment_id": _Field(str, 0, 64),
        "mig_device_uuid": _Field(str, 0, 96),
        "used_bytes_max": _BYTES,
        "used_bytes_last": _BYTES,
        "samples": _COUNT,
    }
)
_ENGINE = _spec(
    {
        "deployment_id": _Field(str, 0, 64, required=True),
        "engine": _Field(str, 0, 32),
        "kv_cache_usage_max": _FRACTION,
        "kv_cache_usage_last": _FRACTION,
        "requests_running_max": _GAUGE,
        "requests_running_last": _GAUGE,
        "requests_waiting_max": _GAUGE,
        "requests_waiting_last": _GAUGE,
        "vram_bytes_max": _BYTES,
        "vram_bytes_last": _BYTES,
        "kv_pool_tokens": _TOKENS,
        "kv_pool_bytes": _BYTES,
        "memory_fraction": _FRACTION,
    }
)
_LATENCY = _spec(
    {
        "count": _GAUGE,
        "window_s": _SECONDS,  # the seconds `count` covers (absent from agents before it)
        "p50_s": _SECONDS,
        "p95_s": _SECONDS,
        "p99_s": _SECONDS,
    }
)
_MIG = _spec(
    {
        "uuid": _Field(str, 1, 96, required=True),
        "card_index": _Field(int, 0, 63),
        "card_uuid": _Field(str, 0, 64),
        "gpu_instance_id": _Field(int, 0, 255),
        "compute_instance_id": _Field(int, 0, 255),
        "profile": _Field(str, 0, 32),
        "start_slot": _Field(int, 0, 7),
        "size_slots": _Field(int, 1, 8),
        "total_bytes": _BYTES,
        "used_bytes_max": _BYTES,
        "used_bytes_last": _BYTES,
        "free_bytes_min": _BYTES,
    }
)
_EVENT = _spec(
    {
        "kind": _Field(str, 1, 32, required=True),
        "ts": _Field(float, 0.0, 1e11, required=True),
        "card_index": _Field(int, 0, 63),
        "card_uuid": _Field(str, 0, 96),
    }
)
_EVENT_DETAIL = _spec(
    {
        "xid": _Field(int, 0, INTEGER),
        "pid": _Field(int, 0, INTEGER),
        "deployment_id": _Field(str, 0, 64),
        "requested_bytes": _BYTES,
        "free_bytes": _BYTES,
        "capacity_bytes": _BYTES,
    }
)
_FAULT = _spec(
    {
        "card_index": _Field(int, 0, 63),
        "call": _Field(str, 0, 100),
        "error": _Field(str, 0, 100),
        "message": _Field(str, 0, 4096),
        "count": _Field(int, 1, INTEGER),
        "first_ts": _Field(float, 0.0, 1e11),
        "last_ts": _Field(float, 0.0, 1e11),
    }
)
_AGENT = _spec({"outbox_depth": _Field(int, 0, INTEGER), "outbox_dropped": _Field(int, 0, BIGINT)})
_HEADER = _spec(
    {
        "host": _Field(str, 1, 100, required=True),
        "seq": _Field(int, 1, BIGINT, required=True),
        "interval_start": _Field(float, 0.0, 1e11, required=True),
        "interval_end": _Field(float, 0.0, 1e11, required=True),
        "polls": _Field(int, 0, INTEGER),
        "events_dropped": _Field(int, 0, INTEGER),
        "faults_dropped": _Field(int, 0, INTEGER),
        "driver_version": _Field(str, 0, 64),
    }
)


# The field tables, by the part of a batch each checks: the typed decoder is built from them.
FIELDS = {
    "header": _HEADER,
    "agent": _AGENT,
    "cards": _CARD,
    "mig_devices": _MIG,
    "processes": _PROCESS,
    "allocator": _ALLOCATOR,
    "engines": _ENGINE,
    "latency": _LATENCY,
    "events": _EVENT,
    "faults": _FAULT,
}


class FieldsChecked(dict):
    """A batch whose every known field the typed decoder (inventory.wire.decoding)
    has checked for type and range already: check_batch runs only the checks across fields."""


def check_batch(payload: Any, window: Window) -> ProcessColumns:
    """Raise BatchRejected with the first problem found; for a sound batch, its process rows
    as the columns the checks across rows read (ingest writes them from these)."""
    typed = type(payload) is FieldsChecked
    if not typed:
        if not isinstance(payload, dict):
            raise BatchRejected("not_an_object", "not_an_object", kind=_kind(payload))
        if payload.get("schema") not in SCHEMAS:
            raise BatchRejected(
                "unknown_schema",
                "unknown",
                "schema",
                schema=repr(payload.get("schema")),
                expected=" or ".join(SCHEMAS),
            )
    for key in ("batch_id", "sampler_id"):
        _uuid(payload.get(key), key)
    if not typed:
        _fields(payload, _HEADER, "")
    start, end = payload["interval_start"], payload["interval_end"]
    if end < start:
        raise BatchRejected("bad_interval", "end_before_start")
    _in_window(start, window, "interval_start")
    _in_window(end, window, "interval_end")
    if payload.get("agent") is not None:
        agent = payload["agent"]
        if not typed:
            _fields(_object(agent, "agent"), _AGENT, "agent")
        if agent.get("mps") is not None:
            _mps_servers(agent["mps"])
    if payload.get("cards") is None:
        # A batch says what its host's cards show, if only that there are none; one without
        # them is no agent's (a forgery, or a sender that lost them on the way).
        raise BatchRejected("missing", "required", "cards")
    cards = _rows(payload, "cards", _CARD, typed)
    _cards(cards)
    totals = {card["index"]: card.get("total_bytes") for card in cards}
    totals.update({card["uuid"]: card.get("total_bytes") for card in cards if card.get("uuid")})
    for position, row in enumerate(_rows(payload, "mig_devices", _MIG, typed)):
        path = f"mig_devices[{position}]"
        if not MIG_UUID.fullmatch(row["uuid"]):
            raise BatchRejected("bad_uuid", "not_mig", f"{path}.uuid", value=repr(row["uuid"]))
        _used_within(row, row.get("total_bytes"), path)
    if payload["schema"] == COLUMNAR_SCHEMA:
        columns = _wire_processes(payload.get("processes"), typed)
        if not _processes_sound(columns, totals):
            _processes(rows_of_wire(payload["processes"]), totals)  # the row at fault, and why
    else:
        processes = _rows(payload, "processes", _PROCESS, typed)
        if not typed:
            for position, row in enumerate(processes):
                if row.get("allocator") is not None:
                    path = f"processes[{position}].allocator"
                    _fields(_object(row["allocator"], path), _ALLOCATOR, path)
        columns = ProcessColumns.of(processes)
        if not _processes_sound(columns, totals):
            _processes(processes, totals)  # finds the first row at fault, and says why
    engines = _rows(payload, "engines", _ENGINE, typed)
    if not typed:
        for position, row in enumerate(engines):
            path = f"engines[{position}].latency"
            for name, latency in _object(row.get("latency") or {}, path).items():
                _fields(_object(latency, f"{path}.{name}"), _LATENCY, f"{path}.{name}")
    # An event's detail is free-form: the typed decoder passes it through whole.
    for position, row in enumerate(_rows(payload, "events", _EVENT, typed)):
        path = f"events[{position}]"
        _in_window(row["ts"], window, f"{path}.ts")
        if row.get("detail") is not None:
            _fields(_object(row["detail"], f"{path}.detail"), _EVENT_DETAIL, f"{path}.detail")
            _strings(row["detail"], f"{path}.detail", depth=0)
    _rows(payload, "faults", _FAULT, typed)
    return columns


def on_the_wire(batch: dict) -> dict:
    """The batch as agents publish it ("gpu-telemetry-batch/2"): its process rows as
    columns, every field of every row."""
    return {
        **batch,
        "schema": COLUMNAR_SCHEMA,
        "processes": columns_of(batch.get("processes") or []),
    }


def _rows(payload: dict, key: str, fields: _Spec, typed: bool = False) -> list[dict]:
    rows = payload.get(key)
    if rows is None:
        return []
    if typed:
        return rows
    if not isinstance(rows, list):
        raise BatchRejected("bad_type", "expected_list", key, kind=_kind(rows))
    if len(rows) > MAX_LIST[key]:
        raise BatchRejected("too_many", "rows", key, count=len(rows), limit=MAX_LIST[key])
    for position, row in enumerate(rows):
        if type(row) is not dict:
            _object(row, f"{key}[{position}]")
        _fields(row, fields, key, position)
    return rows


def _fields(row: dict, fields: _Spec, path: str, position: int | None = None) -> None:
    """Each field of a row: a sound value costs a type test and a comparison; the path of a
    bad one is put together only when it is refused."""
    for name, kind, low, high, required, field in fields:
        value = row.get(name)
        if value is None:
            if required:
                raise BatchRejected("missing", "required", _where(path, position, name))
            continue
        if not _sound(value, kind, low, high):
            _refuse(value, field, _where(path, position, name))


def _sound(value: Any, kind: type, low: float, high: float) -> bool:
    actual = type(value)
    if actual is kind or (actual is int and kind is float):
        if actual is str:
            return low <= len(value) <= high and "\x00" not in value
        return actual is bool or low <= value <= high  # NaN fails the comparison
    return False


def _wire_processes(columns: Any, typed: bool) -> ProcessColumns:
    """A "/2" batch's processes: an object of columns, each a list of one value a row (or
    null: a field no row has), the allocator's figures an object of columns of their own."""
    if columns is None:
        return ProcessColumns.of([])
    if not typed:
        _object(columns, "processes")
        if not isinstance(columns.get("pid"), list):
            if columns.get("pid") is None:
                raise BatchRejected("missing", "required", "processes.pid")
            raise BatchRejected("bad_type", "expected_list", "processes.pid",
                                kind=_kind(columns["pid"]))  # fmt: skip
    count = len(columns["pid"])
    if count > MAX_LIST["processes"]:
        raise BatchRejected("too_many", "rows", "processes", count=count,
                            limit=MAX_LIST["processes"])  # fmt: skip
    allocator = columns.get("allocator")
    if allocator is not None and not typed:
        _object(allocator, "processes.allocator")
    for within, spec, path in ((columns, _PROCESS, "processes"),
                               (allocator or {}, _ALLOCATOR, "processes.allocator")):  # fmt: skip
        for name, kind, low, high, required, field in spec:
            values = within.get(name)
            if values is None or (typed and len(values) == count):
                continue
            where = f"{path}.{name}"
            if not typed and not isinstance(values, list):
                raise BatchRejected("bad_type", "expected_list", where, kind=_kind(values))
            if len(values) != count:
                raise BatchRejected("bad_length", "column", where, length=len(values),
                                    expected=count)  # fmt: skip
            if not typed:
                for position, value in enumerate(values):
                    if value is None:
                        if required:
                            raise BatchRejected("missing", "required", f"{where}[{position}]")
                    elif not _sound(value, kind, low, high):
                        _refuse(value, field, f"{where}[{position}]")
    return ProcessColumns.of_wire(columns)


def _where(path: str, position: int | None, name: str) -> str:
    if position is not None:
        path = f"{path}[{position}]"
    return f"{path}.{name}" if path else name


def _refuse(value: Any, field: _Field, where: str) -> None:
    """Raise the reason a value failed its field's fast check."""
    if field.kind is str:
        _string(value, field, where)
    elif field.kind is bool:
        raise BatchRejected("bad_type", "expected_boolean", where, kind=_kind(value))
    else:
        _number(value, field, where)
    raise BatchRejected("bad_type", "unexpected", where, kind=_kind(value))


def _number(value: Any, field: _Field, where: str) -> None:
    # bool is an int in Python, never in a batch; a float cannot go into an integer column.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BatchRejected("bad_type", "expected_number", where, kind=_kind(value))
    if field.kind is int and not isinstance(value, int):
        raise BatchRejected("bad_type", "expected_whole", where, value=repr(value))
    if isinstance(value, float) and not math.isfinite(value):
        raise BatchRejected("not_finite", "not_finite", where, value=repr(value))
    if not field.low <= value <= field.high:
        bounds = {"low": field.low, "high": field.high}
        if abs(value) < 1e30:
            raise BatchRejected("out_of_range", "outside", where, value=value, **bounds)
        digits = len(str(int(value)))
        raise BatchRejected("out_of_range", "digits_outside", where, digits=digits, **bounds)


def _string(value: Any, field: _Field, where: str) -> None:
    if not isinstance(value, str):
        raise BatchRejected("bad_type", "expected_text", where, kind=_kind(value))
    if not field.low <= len(value) <= field.high:
        raise BatchRejected(
            "bad_length", "between", where, length=len(value), low=field.low, high=field.high
        )
    if "\x00" in value:
        raise BatchRejected("nul_byte", "nul_byte", where)


def _strings(value: Any, where: str, depth: int) -> None:
    """Free-form JSON (event details): bounded depth, no NUL byte anywhere, keys included."""
    if depth > 8:
        raise BatchRejected("too_deep", "levels", where, limit=8)
    if isinstance(value, str):
        if "\x00" in value:
            raise BatchRejected("nul_byte", "nul_byte", where)
        if len(value) > 65536:
            raise BatchRejected("bad_length", "at_most", where, length=len(value), limit=65536)
    elif isinstance(value, float) and not math.isfinite(value):
        raise BatchRejected("not_finite", "not_finite", where, value=repr(value))
    elif isinstance(value, int | float) and not isinstance(value, bool) and abs(value) > BIGINT:
        # Whatever its JSON kind: one decoder reads -2**63 - 1 as an integer, another as a float.
        raise BatchRejected("out_of_range", "beyond_64_bits", where)
    elif isinstance(value, dict):
        for key, item in value.items():
            _strings(key, where, depth + 1)
            _strings(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for position, item in enumerate(value):
            _strings(item, f"{where}[{position}]", depth + 1)


def _mps_servers(servers: Any) -> None:
    """The agent's live MPS state: a list of server objects, free-form inside but bounded."""
    if not isinstance(servers, list):
        raise BatchRejected("bad_type", "expected_list", "agent.mps", kind=_kind(servers))
    if len(servers) > 64:
        raise BatchRejected("too_many", "mps_servers", "agent.mps", count=len(servers), limit=64)
    for position, server in enumerate(servers):
        _strings(_object(server, f"agent.mps[{position}]"), f"agent.mps[{position}]", depth=0)


def _cards(cards: list[dict]) -> None:
    if not _cards_sound(cards):
        _card_by_card(cards)


def _card_by_card(cards: list[dict]) -> None:
    """Raise the first card's problem, its path put together only then."""
    seen_index, seen_uuid = set(), set()
    for position, card in enumerate(cards):
        uuid_ = card.get("uuid")
        if uuid_ and not CARD_UUID.fullmatch(uuid_):
            raise BatchRejected(
                "bad_uuid", "not_card", f"cards[{position}].uuid", value=repr(uuid_)
            )
        if card["index"] in seen_index:
            raise BatchRejected(
                "duplicate", "card_index", f"cards[{position}]", index=card["index"]
            )
        seen_index.add(card["index"])
        if uuid_:
            if uuid_ in seen_uuid:
                raise BatchRejected("duplicate", "card_uuid", f"cards[{position}]", uuid=uuid_)
            seen_uuid.add(uuid_)
        total = card.get("total_bytes")
        if total is not None:
            figures = list(map(card.get, _CARD_WITHIN_TOTAL))
            if None in figures:
                figures = [figure for figure in figures if figure is not None]
            if figures and max(figures) > total * (1 + USED_OVER_TOTAL_TOLERANCE):
                for key in _CARD_WITHIN_TOTAL:  # which one, and its path
                    _not_above(card.get(key), total, key, f"cards[{position}]")


_CARD_WITHIN_TOTAL = ("used_bytes_max", "used_bytes_last", "reserved_bytes_max",
                      "reserved_bytes_last", "free_bytes_min", "free_bytes_max",
                      "free_bytes_last")  # fmt: skip
_CARD_FIGURES = operator.itemgetter("index", "uuid", "total_bytes", *_CARD_WITHIN_TOTAL)


def _cards_sound(cards: list[dict]) -> bool:
    """Whether _card_by_card finds nothing, asked of the batch's cards at once: every card with
    every figure, distinct indexes and UUIDs, and no figure above the smallest card's total.
    Anything else (a figure left out, cards of two sizes) is for the card by card search."""
    if not cards:
        return True
    try:
        indexes, uuids, totals, *figures = zip(*map(_CARD_FIGURES, cards), strict=True)
        if not all(map(CARD_UUID.fullmatch, uuids)):
            return False
        within = max(map(max, figures)) <= min(totals) * (1 + USED_OVER_TOTAL_TOLERANCE)
    except (KeyError, TypeError):  # a figure absent, or None
        return False
    return within and len(set(indexes)) == len(cards) and len(set(uuids)) == len(cards)


def _processes_sound(columns: ProcessColumns, totals: dict) -> bool:
    """Whether _processes finds nothing, asked of whole columns at once (set, map and zip
    run in C): the row by row search runs only for a batch that has something to refuse."""
    if None in columns.card:
        return False
    if len(set(zip(columns.card, columns.pid, columns.kind, strict=True))) < len(columns):
        return False
    limits = [total for total in map(totals.get, set(columns.card)) if total is not None]
    if not limits:  # no card with a total: nothing to hold the rows to
        return True
    with contextlib.suppress(TypeError):  # a figure left out: row by row, below
        largest = max(max(columns.used_bytes_max), max(columns.used_bytes_last))
        if largest <= min(limits) * (1 + USED_OVER_TOTAL_TOLERANCE):
            return True
    limits = [
        None if total is None else total * (1 + USED_OVER_TOTAL_TOLERANCE)
        for total in map(totals.get, columns.card)
    ]
    if None in limits:  # some card without a total: nothing to hold its rows to
        limits = [math.inf if limit is None else limit for limit in limits]
    for used in (columns.used_bytes_max, columns.used_bytes_last):
        if None in used:
            used = [value or 0 for value in used]
        if any(map(operator.gt, used, limits)):
            return False
    return True


def _processes(rows: list[dict], totals: dict) -> None:
    """Each (card, PID) once, and none using more than its card has: raises the first row's
    problem, its path put together only then."""
    seen = set()
    limits = {
        card: total * (1 + USED_OVER_TOTAL_TOLERANCE)
        for card, total in totals.items()
        if total is not None
    }
    for position, row in enumerate(rows):
        card = row.get("card_uuid") or row.get("card_index")
        if card is None:
            raise BatchRejected("missing", "card", f"processes[{position}]")
        # NVML lists an MPS client in its compute and its MPS list: one row of each kind.
        key = (card, row["pid"], row.get("kind"))
        if key in seen:
            raise BatchRejected(
                "duplicate", "pid", f"processes[{position}]", pid=row["pid"], card=card
            )
        seen.add(key)
        limit = limits.get(card)
        if limit is not None and (
            (row.get("used_bytes_max") or 0) > limit or (row.get("used_bytes_last") or 0) > limit
        ):
            _used_within(row, totals[card], f"processes[{position}]")


def _used_within(row: dict, total: int | None, path: str) -> None:
    for key in ("used_bytes_max", "used_bytes_last"):
        _not_above(row.get(key), total, key, path)


def _not_above(value: int | None, total: int | None, key: str, path: str) -> None:
    if value is None or total is None:
        return
    if value > total * (1 + USED_OVER_TOTAL_TOLERANCE):
        raise BatchRejected(
            "over_total", "over_total", f"{path}.{key}", key=key, value=value, total=total
        )


def _in_window(ts: float, window: Window, where: str) -> None:
    if ts < window.oldest:
        raise BatchRejected("too_old", "too_old", where)
    if ts > window.newest:
        raise BatchRejected("in_the_future", "in_the_future", where)


def _uuid(value: Any, where: str) -> None:
    if not isinstance(value, str) or len(value) > 64:
        raise BatchRejected("bad_uuid", "expected_uuid", where, kind=_kind(value))
    if CANONICAL_UUID.fullmatch(value):
        return
    try:
        uuid.UUID(value)
    except ValueError:
        raise BatchRejected("bad_uuid", "not_uuid", where, value=repr(value)) from None


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise BatchRejected("bad_type", "expected_object", where, kind=_kind(value))
    return value


_KINDS = {dict: "object", list: "list", str: "text", bool: "boolean", type(None): "null",
          int: "integer", float: "float"}  # fmt: skip


def _kind(value: Any) -> dict:
    """What JSON value this was, as a reason (JSON decodes to no other type)."""
    return {"code": f"{REASON_PREFIX}kind.{_KINDS.get(type(value), 'object')}", "params": {}}
