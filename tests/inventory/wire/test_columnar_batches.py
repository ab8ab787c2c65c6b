"""Batches on the wire with their process rows as columns ("gpu-telemetry-batch/2"): what the
agent publishes. Each gets the verdict its rows would get ("/1", still accepted), the same
verdict typed or plain, and the same columns for ingest to write."""

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kombu import Connection

from inventory.agent.transport import batch_publisher
from inventory.wire import decoding as batch_decoding
from inventory.wire import signing
from inventory.wire.columns import columns_of, rows_of_wire
from inventory.wire.queue import INGEST_QUEUE
from inventory.wire.schema import COLUMNAR_SCHEMA, FIELDS, FieldsChecked, check_batch, on_the_wire
from tests.examples import examples
from tests.inventory.wire.test_batch_decoding import _edges, _plain, _typed
from tests.inventory.wire.test_batch_schema import (
    HOSTILE,
    JSON_VALUES,
    REAL,
    WINDOW,
    full_batch,
    real_batch,
    set_value,
)


def _either_way(body: bytes):
    """The verdict typed and plain, which must agree."""
    typed, plain = _typed(body), _plain(body)
    assert typed == plain
    return typed


def _wire_body(payload) -> bytes:
    return json.dumps(on_the_wire(payload)).encode()


def test_real_batches_on_the_wire_are_taken_typed_with_the_columns_of_their_rows():
    for payload in [*REAL, full_batch()]:
        body = _wire_body(payload)
        typed = batch_decoding.decode(body)
        assert type(typed) is FieldsChecked and typed["schema"] == COLUMNAR_SCHEMA
        assert check_batch(typed, WINDOW) == check_batch(copy.deepcopy(payload), WINDOW)


# A wrong schema has no columnar form: on_the_wire names its own.
@pytest.mark.parametrize(
    ("mutate", "code", "path"), [case for case in HOSTILE if case[1] != "unknown_schema"]
)
def test_each_hostile_value_in_columns_gets_the_reason_it_gets_in_rows(mutate, code, path):
    payload = real_batch()
    mutate(payload)
    in_rows = _either_way(json.dumps(payload).encode())  # over the wire, as sent
    in_columns = _either_way(_wire_body(payload))
    assert (in_columns and in_columns[0]) == (in_rows and in_rows[0])
    assert (in_columns is None) == (code is None)


def _process_field_paths():
    return [
        (within, name, kind, low, high)
        for within, part in (("processes", "processes"), ("processes.allocator", "allocator"))
        for name, kind, low, high, _, _ in FIELDS[part]
    ]


@st.composite
def _column_and_value(draw):
    within, name, kind, low, high = draw(st.sampled_from(_process_field_paths()))
    return within, name, draw(_edges(kind, low, high))


@settings(max_examples=examples(300), deadline=None)
@given(change=_column_and_value())
def test_every_column_value_at_its_edges_gets_its_rows_verdict_either_way(change):
    within, name, value = change
    rows = full_batch()
    target = rows["processes"][0]
    if within == "processes.allocator":
        target = target["allocator"]
    target[name] = value
    in_rows = _either_way(json.dumps(rows).encode())
    in_columns = _either_way(_wire_body(rows))
    assert (in_columns and in_columns[0]) == (in_rows and in_rows[0])
    if in_rows is not None and in_rows[1].startswith("processes[0]."):
        assert in_columns[1] in (f"{within}.{name}[0]", in_rows[1])


_WIRE_PATHS = st.sampled_from(
    ["processes", "processes.pid", "processes.pid.0", "processes.card_uuid",
     "processes.card_uuid.0", "processes.kind", "processes.used_bytes_max",
     "processes.used_bytes_max.0", "processes.allocator", "processes.allocator.reserved_bytes",
     "processes.allocator.reserved_bytes.0", "processes.name_error", "processes.deployment_id"]
)  # fmt: skip


@settings(max_examples=examples(300), deadline=None)
@given(path=_WIRE_PATHS, value=JSON_VALUES)
def test_any_value_anywhere_in_the_columns_gets_one_verdict_and_never_an_error(path, value):
    payload = on_the_wire(full_batch())
    set_value(path, value)(payload)
    _either_way(json.dumps(payload).encode())


def test_a_column_shorter_than_the_others_is_refused_with_its_name():
    payload = on_the_wire(full_batch())
    payload["processes"]["used_bytes_max"].pop()
    assert _either_way(json.dumps(payload).encode()) == (
        "bad_length",
        "processes.used_bytes_max",
    )
    payload = on_the_wire(full_batch())
    payload["processes"]["allocator"]["reserved_bytes"].append(1)
    assert _either_way(json.dumps(payload).encode())[0] == "bad_length"


_row = st.fixed_dictionaries(
    {"pid": st.integers(1, 10), "name": st.none() | st.text(max_size=4)},
    optional={
        "card_index": st.none() | st.integers(0, 7),
        "allocator": st.none()
        | st.fixed_dictionaries({}, optional={"reserved_bytes": st.integers(0, 9)}),
    },
)


@given(rows=st.lists(_row, max_size=5))
def test_rows_come_back_from_their_columns(rows):
    back = rows_of_wire(json.loads(json.dumps(columns_of(rows))))
    assert len(back) == len(rows)
    for sent, read in zip(rows, back, strict=True):
        assert read["allocator"] == (sent.get("allocator") or None)
        assert {k: v for k, v in read.items() if k != "allocator" and v is not None} == {
            k: v for k, v in sent.items() if k != "allocator" and v is not None
        }


def test_the_agent_publishes_columns_signed_over_the_body_it_sends():
    payload = real_batch()
    with Connection("memory://") as connection:
        publish = batch_publisher(lambda: Connection("memory://"), lambda host: "secret")
        publish(payload)
        message = connection.SimpleQueue(INGEST_QUEUE).get(timeout=1)
        body = message.body if isinstance(message.body, bytes) else message.body.encode()
        assert signing.verify("secret", body, message.headers[signing.HEADER])
        sent = json.loads(body)
        assert sent["schema"] == COLUMNAR_SCHEMA
        assert sent["processes"]["pid"] == [row["pid"] for row in payload["processes"]]
        message.ack()
