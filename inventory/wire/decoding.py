"""A batch's JSON decoded with its field checks done on the way, in C (msgspec).

The ingest worker decodes every batch it takes; checking each field afterwards in Python cost
more than the decoding and the COPY together. The typed decoder checks types, ranges, lengths
and list sizes while it decodes, from the same field tables as batch_schema's check, and hands
over a FieldsChecked batch, on which check_batch runs only the checks across fields (used
within total, duplicates, the time window, UUIDs, free-form details).

It is only a faster way to the same answer. A body it refuses, for whatever reason, is
decoded as plain JSON and goes through the whole check, which finds the exact reason, or
accepts it where the typed decoder was stricter (a falsy latency, say). Fields it does not
know are left out of the batch it returns, as ingest reads none of them. Either form of a
batch is decoded: process rows ("gpu-telemetry-batch/1") or columns ("/2").
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, Required, TypedDict

import msgspec
import orjson

from inventory.wire.schema import COLUMNAR_SCHEMA, FIELDS, MAX_LIST, SCHEMA, FieldsChecked, _Spec

# JSON writes a NUL inside a string only as this escape; the plain path refuses it by name.
# Most bodies have no backslash at all, which one memchr finds (the escape's own search
# costs a quarter of the decoding).
_NUL_ESCAPE = b"\\u0000"
_BACKSLASH = b"\\"


def _value_type(kind: type, low: float, high: float) -> Any:
    if kind is str:
        return Annotated[str, msgspec.Meta(min_length=int(low), max_length=int(high))]
    if kind is bool:
        return bool
    return Annotated[kind, msgspec.Meta(ge=low, le=high)]


def _typed(name: str, spec: _Spec, **extra: Any) -> type:
    fields: dict[str, Any] = {}
    for field, kind, low, high, required, _ in spec:
        value = _value_type(kind, low, high)
        fields[field] = Required[value] if required else NotRequired[value | None]
    fields.update(extra)
    return TypedDict(name, fields, total=False)


def _rows(key: str, row: type) -> Any:
    return NotRequired[Annotated[list[row], msgspec.Meta(max_length=MAX_LIST[key])] | None]


def _columns(name: str, spec: _Spec, **extra: Any) -> type:
    """A "/2" batch's processes: a list of values a field, each value as _typed checks it."""
    fields: dict[str, Any] = {}
    for field, kind, low, high, required, _ in spec:
        value = _value_type(kind, low, high)
        column = Annotated[list[value if required else value | None],
                           msgspec.Meta(max_length=MAX_LIST["processes"])]  # fmt: skip
        fields[field] = Required[column] if required else NotRequired[column | None]
    fields.update(extra)
    return TypedDict(name, fields, total=False)


def _batch(schema: str, processes: type) -> type:
    return _typed(
        "Batch",
        FIELDS["header"],
        schema=Required[Literal[schema]],
        # UUIDs are parsed by check_batch on either path.
        batch_id=NotRequired[Any],
        sampler_id=NotRequired[Any],
        agent=NotRequired[_typed("Agent", FIELDS["agent"], mps=NotRequired[Any]) | None],
        cards=_rows("cards", _typed("Card", FIELDS["cards"])),
        mig_devices=_rows("mig_devices", _typed("MigDevice", FIELDS["mig_devices"])),
        processes=processes,
        engines=_rows(
            "engines",
            _typed(
                "Engine",
                FIELDS["engines"],
                latency=NotRequired[dict[str, _typed("Latency", FIELDS["latency"])] | None],
            ),
        ),
        events=_rows(
            "events", _typed("Event", FIELDS["events"], detail=NotRequired[dict[str, Any] | None])
        ),
        faults=_rows("faults", _typed("Fault", FIELDS["faults"])),
    )


_DECODER = msgspec.json.Decoder(
    _batch(
        SCHEMA,
        _rows(
            "processes",
            _typed(
                "Process",
                FIELDS["processes"],
                allocator=NotRequired[_typed("Allocator", FIELDS["allocator"]) | None],
            ),
        ),
    )
)
# The column lengths are check_batch's to compare.
_COLUMNAR_DECODER = msgspec.json.Decoder(
    _batch(
        COLUMNAR_SCHEMA,
        NotRequired[
            _columns(
                "ProcessColumns",
                FIELDS["processes"],
                allocator=NotRequired[_columns("AllocatorColumns", FIELDS["allocator"]) | None],
            )
            | None
        ],
    )
)
_COLUMNAR_MARK = f'"{COLUMNAR_SCHEMA}"'.encode()


def decode(body: bytes) -> Any:
    """The batch in `body`: a FieldsChecked where the typed decoder took it, else the JSON as
    orjson reads it, for check_batch to check whole; orjson.JSONDecodeError if not JSON."""
    if _BACKSLASH not in body or _NUL_ESCAPE not in body:
        # A batch that only mentions the columnar schema fails that decoder, and is checked whole.
        decoder = _COLUMNAR_DECODER if _COLUMNAR_MARK in body else _DECODER
        try:
            return FieldsChecked(decoder.decode(body))
        # RecursionError: JSON nested deeper than msgspec goes (orjson refuses it by name).
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            pass
    return orjson.loads(body)
