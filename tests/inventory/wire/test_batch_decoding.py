"""The typed decoder: the same verdict as the plain decoding and the whole check, faster.

Every body is judged both ways, typed (batch_decoding.decode, then the checks across fields)
and plain (orjson, then check_batch whole): the reason code and path must agree, and a batch
the typed decoder accepts must hold, field for field, what orjson reads.
"""

import json
import math

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from inventory.wire import decoding as batch_decoding
from inventory.wire.schema import FIELDS, MAX_STRING, BatchRejected, FieldsChecked, check_batch
from tests.examples import examples
from tests.inventory.wire.test_batch_schema import (
    HOSTILE,
    JSON_VALUES,
    PATHS,
    REAL,
    WINDOW,
    full_batch,
    real_batch,
    set_value,
)


def _verdict(payload) -> tuple[str, str] | None:
    try:
        check_batch(payload, WINDOW)
    except BatchRejected as rejected:
        return rejected.code, rejected.path
    return None


def _typed(body: bytes):
    try:
        return _verdict(batch_decoding.decode(body))
    except orjson.JSONDecodeError:
        return "not_json", ""


def _plain(body: bytes):
    try:
        return _verdict(orjson.loads(body))
    except orjson.JSONDecodeError:
        return "not_json", ""


def _body(payload) -> bytes:
    # json, not orjson: NaN and Infinity go out as the tokens a broken sender writes.
    return json.dumps(payload).encode()


def _holds_what_orjson_reads(typed, plain, where="$"):
    """Every value the typed batch keeps is the one in the JSON (an int may come as a float
    where the column is real)."""
    if isinstance(typed, dict):
        assert isinstance(plain, dict), where
        assert set(typed) <= set(plain), where
        for key, value in typed.items():
            _holds_what_orjson_reads(value, plain[key], f"{where}.{key}")
    elif isinstance(typed, list):
        assert isinstance(plain, list) and len(typed) == len(plain), where
        for position, (a, b) in enumerate(zip(typed, plain, strict=True)):
            _holds_what_orjson_reads(a, b, f"{where}[{position}]")
    else:
        assert typed == plain and type(typed) in (type(plain), float), where


def test_real_agent_batches_are_taken_typed_with_every_value_ingest_reads():
    for payload in [*REAL, full_batch()]:
        body = orjson.dumps(payload)
        typed = batch_decoding.decode(body)
        assert type(typed) is FieldsChecked
        _holds_what_orjson_reads(typed, orjson.loads(body))
        check_batch(typed, WINDOW)
    # What the console's ingest reads of a process row is all there.
    process = batch_decoding.decode(orjson.dumps(full_batch()))["processes"][0]
    assert {"pid", "card_uuid", "used_bytes_max", "allocator", "deployment_id"} <= set(process)


@pytest.mark.parametrize(("mutate", "code", "path"), HOSTILE)
def test_each_hostile_value_gets_the_same_reason_either_way(mutate, code, path):
    payload = real_batch()
    mutate(payload)
    body = _body(payload)
    # Over the wire some reasons change (NaN is no JSON; orjson reads 2**64 + 1 as a float).
    assert _typed(body) == _plain(body)
    assert (_typed(body) is None) == (code is None)


def test_a_nul_byte_anywhere_goes_the_plain_way_and_is_named():
    payload = real_batch()
    payload["processes"][0]["name"] = "vllm\x00"
    body = orjson.dumps(payload)
    assert type(batch_decoding.decode(body)) is not FieldsChecked
    assert _typed(body) == ("nul_byte", "processes[0].name")


@pytest.mark.parametrize("where", ["events.0.detail", "agent.mps", "cards"])
def test_json_nested_thousands_deep_is_refused_the_plain_way(where):
    payload = full_batch()
    payload["agent"] = {"mps": []}
    body = orjson.dumps(payload)
    deep = b"[" * 5000 + b"]" * 5000
    marker = {"events.0.detail": b'"requested_bytes"', "agent.mps": b'"mps":', "cards": b'"cards":'}
    head, tail = body.split(marker[where], 1)
    if where == "events.0.detail":
        body = head + b'"x":' + deep + b"," + marker[where] + tail
    else:
        body = head + marker[where] + deep + b"," + b'"unused":' + tail
    assert _typed(body) == _plain(body) == ("not_json", "")


def test_a_batch_stricter_typed_than_checked_still_lands_the_plain_way():
    """A latency sent as [] is no object, but check_batch reads a falsy one as none."""
    payload = full_batch()
    payload["engines"][0]["latency"] = []
    body = orjson.dumps(payload)
    assert type(batch_decoding.decode(body)) is not FieldsChecked
    assert _typed(body) is None


def test_fields_the_check_does_not_know_are_left_out_of_a_typed_batch():
    payload = real_batch()
    payload["cards"][0]["fan_speed"] = "a newer agent's"
    payload["future"] = {"x": 1}
    typed = batch_decoding.decode(orjson.dumps(payload))
    assert type(typed) is FieldsChecked
    assert "fan_speed" not in typed["cards"][0] and "future" not in typed


@settings(max_examples=examples(300), deadline=None)
@given(path=PATHS, value=JSON_VALUES)
# orjson reads a number below -2**63 as a float, msgspec as an integer.
@example(path="events.0.detail", value={"": -(2**63) - 1})
@example(path="events.0.detail", value={"": 2**64})
def test_any_value_anywhere_gets_the_same_verdict_either_way(path, value):
    payload = full_batch()
    set_value(path, value)(payload)
    body = _body(payload)
    assert _typed(body) == _plain(body)


def _field_paths():
    """Every field the tables know, at a place a batch has it."""
    parents = {
        "header": "", "agent": "agent.", "cards": "cards.0.", "mig_devices": "mig_devices.0.",
        "processes": "processes.0.", "allocator": "processes.0.allocator.",
        "engines": "engines.0.", "latency": "engines.0.latency.e2e.", "events": "events.0.",
        "faults": "faults.0.",
    }  # fmt: skip
    return [
        (parents[part] + name, kind, low, high)
        for part, spec in FIELDS.items()
        for name, kind, low, high, _, _ in spec
    ]


def _edges(kind, low, high):
    """Values at and just past a field's bounds, and of every other JSON kind."""
    if kind is str:
        sizes = {int(low), max(0, int(low) - 1), int(high), int(high) + 1, MAX_STRING * 3}
        texts = [c * n for n in sizes for c in ("a", "é", "😀")]
        return st.sampled_from([*texts, "nul\x00", 0, None, True, [], {}])
    if kind is bool:
        return st.sampled_from([True, False, 0, 1, "true", None, 0.0])
    if kind is int:
        return st.sampled_from(
            [int(low), int(low) - 1, int(high), int(high) + 1, 2**64, -(2**63) - 1,
             float(low), 1.5, True, None, "1", math.inf]
        )  # fmt: skip
    return st.sampled_from(
        [low, high, low - 1e-9, high * 1.001 + 1, int(low), int(high), 10**400 if high > 1e300
         else int(high) + 1, math.nan, -math.inf, True, None, "0.5"]
    )  # fmt: skip


@st.composite
def _field_and_value(draw):
    path, kind, low, high = draw(st.sampled_from(_field_paths()))
    return path, draw(_edges(kind, low, high))


def _with_every_part():
    payload = full_batch()
    payload["mig_devices"] = [{"uuid": "MIG-" + "a" * 32, "total_bytes": 2**30}]
    payload["faults"] = [{"card_index": 0, "call": "nvmlDeviceGetUtilizationRates", "count": 2}]
    payload["agent"] = {"outbox_depth": 0, "outbox_dropped": 0}
    return payload


@settings(max_examples=examples(500), deadline=None)
@given(change=_field_and_value())
def test_every_field_at_its_edges_gets_the_same_verdict_either_way(change):
    path, value = change
    payload = _with_every_part()
    set_value(path, value)(payload)
    body = _body(payload)
    assert _typed(body) == _plain(body)
