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

import math
import re
import uuid
from dataclasses import dataclass
from typing import Any

SCHEMA = "gpu-telemetry-batch/1"

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
CARD_UUID = re.compile(r"GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
MIG_UUID = re.compile(r"MIG-[0-9A-Za-z/-]{8,80}")


class BatchRejected(Exception):
    """The batch can never be written as it is; retrying would not help."""

    def __init__(self, code: str, message: str, path: str = "") -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.code = code
        self.message = message
        self.path = path


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
        "p50_s": _SECONDS,
        "p95_s": _SECONDS,
        "p99_s": _SECONDS,
    }
)
_MIG = _spec(
    {
        "uuid": _Field(str, 1, 96, required=True),
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


def check_batch(payload: Any, window: Window) -> None:
    """Raise BatchRejected with the first problem found; return None for a sound batch."""
    if not isinstance(payload, dict):
        raise BatchRejected("not_an_object", f"a batch is a JSON object, not {_kind(payload)}")
    if payload.get("schema") != SCHEMA:
        raise BatchRejected(
            "unknown_schema", f"schema {payload.get('schema')!r}, expected {SCHEMA}", "schema"
        )
    for key in ("batch_id", "sampler_id"):
        _uuid(payload.get(key), key)
    _fields(payload, _HEADER, "")
    start, end = payload["interval_start"], payload["interval_end"]
    if end < start:
        raise BatchRejected("bad_interval", "interval_end is before interval_start")
    _in_window(start, window, "interval_start")
    _in_window(end, window, "interval_end")
    if payload.get("agent") is not None:
        agent = _object(payload["agent"], "agent")
        _fields(agent, _AGENT, "agent")
        if agent.get("mps") is not None:
            _mps_servers(agent["mps"])
    cards = _rows(payload, "cards", _CARD)
    _cards(cards)
    totals = {card["index"]: card.get("total_bytes") for card in cards}
    totals.update({card["uuid"]: card.get("total_bytes") for card in cards if card.get("uuid")})
    for position, row in enumerate(_rows(payload, "mig_devices", _MIG)):
        path = f"mig_devices[{position}]"
        if not MIG_UUID.fullmatch(row["uuid"]):
            raise BatchRejected("bad_uuid", f"{row['uuid']!r} is no NVML MIG UUID", f"{path}.uuid")
        _used_within(row, row.get("total_bytes"), path)
    processes = _rows(payload, "processes", _PROCESS)
    _processes(processes, totals)
    for position, row in enumerate(processes):
        if row.get("allocator") is not None:
            path = f"processes[{position}].allocator"
            _fields(_object(row["allocator"], path), _ALLOCATOR, path)
    for position, row in enumerate(_rows(payload, "engines", _ENGINE)):
        path = f"engines[{position}].latency"
        for name, latency in _object(row.get("latency") or {}, path).items():
            _fields(_object(latency, f"{path}.{name}"), _LATENCY, f"{path}.{name}")
    for position, row in enumerate(_rows(payload, "events", _EVENT)):
        path = f"events[{position}]"
        _in_window(row["ts"], window, f"{path}.ts")
        if row.get("detail") is not None:
            _fields(_object(row["detail"], f"{path}.detail"), _EVENT_DETAIL, f"{path}.detail")
            _strings(row["detail"], f"{path}.detail", depth=0)
    _rows(payload, "faults", _FAULT)


def _rows(payload: dict, key: str, fields: _Spec) -> list[dict]:
    rows = payload.get(key)
    if rows is None:
        return []
    if not isinstance(rows, list):
        raise BatchRejected("bad_type", f"expected a list, got {_kind(rows)}", key)
    if len(rows) > MAX_LIST[key]:
        raise BatchRejected("too_many", f"{len(rows)} rows, at most {MAX_LIST[key]}", key)
    for position, row in enumerate(rows):
        if type(row) is not dict:
            _object(row, f"{key}[{position}]")
        _fields(row, fields, key, position)
    return rows


def _fields(row: dict, fields: _Spec, path: str, position: int | None = None) -> None:
    """The hot loop of ingest: a sound value costs a type test and a comparison; the path of
    a bad one is put together only when it is refused."""
    for name, kind, low, high, required, field in fields:
        value = row.get(name)
        if value is None:
            if required:
                raise BatchRejected("missing", "required", _where(path, position, name))
            continue
        actual = type(value)
        if actual is kind or (actual is int and kind is float):
            if actual is str:
                if low <= len(value) <= high and "\x00" not in value:
                    continue
            elif actual is bool or low <= value <= high:  # NaN fails the comparison
                continue
        _refuse(value, field, _where(path, position, name))


def _where(path: str, position: int | None, name: str) -> str:
    if position is not None:
        path = f"{path}[{position}]"
    return f"{path}.{name}" if path else name


def _refuse(value: Any, field: _Field, where: str) -> None:
    """Raise the reason a value failed its field's fast check."""
    if field.kind is str:
        _string(value, field, where)
    elif field.kind is bool:
        raise BatchRejected("bad_type", f"expected true or false, got {_kind(value)}", where)
    else:
        _number(value, field, where)
    raise BatchRejected("bad_type", f"unexpected {_kind(value)}", where)


def _number(value: Any, field: _Field, where: str) -> None:
    # bool is an int in Python, never in a batch; a float cannot go into an integer column.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BatchRejected("bad_type", f"expected a number, got {_kind(value)}", where)
    if field.kind is int and not isinstance(value, int):
        raise BatchRejected("bad_type", f"expected a whole number, got {value!r}", where)
    if isinstance(value, float) and not math.isfinite(value):
        raise BatchRejected("not_finite", f"{value!r} is not a finite number", where)
    if not field.low <= value <= field.high:
        shown = value if abs(value) < 1e30 else f"a number of {len(str(int(value)))} digits"
        raise BatchRejected(
            "out_of_range", f"{shown} is outside [{field.low:g}, {field.high:g}]", where
        )


def _string(value: Any, field: _Field, where: str) -> None:
    if not isinstance(value, str):
        raise BatchRejected("bad_type", f"expected text, got {_kind(value)}", where)
    if not field.low <= len(value) <= field.high:
        raise BatchRejected(
            "bad_length", f"{len(value)} characters, expected {field.low}-{field.high}", where
        )
    if "\x00" in value:
        raise BatchRejected("nul_byte", "text holds a NUL byte", where)


def _strings(value: Any, where: str, depth: int) -> None:
    """Free-form JSON (event details): bounded depth, no NUL byte anywhere, keys included."""
    if depth > 8:
        raise BatchRejected("too_deep", "nested more than 8 levels", where)
    if isinstance(value, str):
        if "\x00" in value:
            raise BatchRejected("nul_byte", "text holds a NUL byte", where)
        if len(value) > 65536:
            raise BatchRejected("bad_length", f"{len(value)} characters, at most 65536", where)
    elif isinstance(value, float) and not math.isfinite(value):
        raise BatchRejected("not_finite", f"{value!r} is not a finite number", where)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > BIGINT:
        raise BatchRejected("out_of_range", "an integer beyond 64 bits", where)
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
        raise BatchRejected("bad_type", f"expected a list, got {_kind(servers)}", "agent.mps")
    if len(servers) > 64:
        raise BatchRejected("too_many", f"{len(servers)} MPS servers, at most 64", "agent.mps")
    for position, server in enumerate(servers):
        _strings(_object(server, f"agent.mps[{position}]"), f"agent.mps[{position}]", depth=0)


def _cards(cards: list[dict]) -> None:
    seen_index, seen_uuid = set(), set()
    for position, card in enumerate(cards):
        path = f"cards[{position}]"
        if card.get("uuid") and not CARD_UUID.fullmatch(card["uuid"]):
            raise BatchRejected(
                "bad_uuid", f"{card['uuid']!r} is no NVML card UUID", f"{path}.uuid"
            )
        if card["index"] in seen_index:
            raise BatchRejected("duplicate", f"card index {card['index']} twice", path)
        seen_index.add(card["index"])
        if card.get("uuid"):
            if card["uuid"] in seen_uuid:
                raise BatchRejected("duplicate", f"card {card['uuid']} twice", path)
            seen_uuid.add(card["uuid"])
        total = card.get("total_bytes")
        _used_within(card, total, path)
        for key in ("reserved_bytes_max", "free_bytes_max", "free_bytes_last"):
            _not_above(card.get(key), total, key, path)


def _processes(rows: list[dict], totals: dict) -> None:
    seen = set()
    for position, row in enumerate(rows):
        path = f"processes[{position}]"
        card = row.get("card_uuid") or row.get("card_index")
        if card is None:
            raise BatchRejected("missing", "card_uuid or card_index is required", path)
        # NVML lists an MPS client in its compute and its MPS list: one row of each kind.
        key = (card, row["pid"], row.get("kind"))
        if key in seen:
            raise BatchRejected("duplicate", f"PID {row['pid']} twice on card {card}", path)
        seen.add(key)
        _used_within(row, totals.get(card), path)


def _used_within(row: dict, total: int | None, path: str) -> None:
    for key in ("used_bytes_max", "used_bytes_last"):
        _not_above(row.get(key), total, key, path)


def _not_above(value: int | None, total: int | None, key: str, path: str) -> None:
    if value is None or total is None:
        return
    if value > total * (1 + USED_OVER_TOTAL_TOLERANCE):
        raise BatchRejected(
            "over_total", f"{key} {value} is above the total of {total} bytes", f"{path}.{key}"
        )


def _in_window(ts: float, window: Window, where: str) -> None:
    if ts < window.oldest:
        raise BatchRejected("too_old", "older than the raw samples still kept", where)
    if ts > window.newest:
        raise BatchRejected("in_the_future", "later than now plus the clock skew allowed", where)


def _uuid(value: Any, where: str) -> None:
    if not isinstance(value, str) or len(value) > 64:
        raise BatchRejected("bad_uuid", f"expected a UUID, got {_kind(value)}", where)
    try:
        uuid.UUID(value)
    except ValueError:
        raise BatchRejected("bad_uuid", f"{value!r} is not a UUID", where) from None


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise BatchRejected("bad_type", f"expected an object, got {_kind(value)}", where)
    return value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "a boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )
