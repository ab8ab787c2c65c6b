"""The process sample rows ingest builds from a batch's columns are the rows a reading of the
batch row by row gives: card by UUID else index, deployment and MIG device only where the host
has them, the allocator's figures and fragmentation index, the defaults of a missing field."""

import datetime as dt
import json
import uuid

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from inventory.analytics.fragmentation import fragmentation_index
from inventory.analytics.snapshot import allocator_from_batch
from inventory.ingest.writer import IngestResult, ingest_batches
from inventory.models import Event, ProcessSample
from inventory.wire.schema import on_the_wire
from tests.batches import GIB, batch, process_row
from tests.examples import examples
from tests.factories import DeploymentFactory, GpuFactory, MigSliceFactory

pytestmark = pytest.mark.django_db

T0 = (dt.datetime.now(tz=dt.UTC) - dt.timedelta(hours=1)).replace(second=5, microsecond=0)
UNKNOWN_CARD = "GPU-ffffffff-0000-4000-8000-000000000000"

_allocator = st.none() | st.fixed_dictionaries(
    {},
    optional={
        key: st.none() | st.integers(0, 20 * GIB)
        for key in ("reserved_bytes", "allocated_bytes", "inactive_split_bytes",
                    "largest_free_block_bytes")
    },
)  # fmt: skip
_row = st.fixed_dictionaries(
    {"card": st.sampled_from(["uuid0", "index1", "unknown_uuid_index1", "unknown", "index5"])},
    optional={
        "kind": st.sampled_from([None, "", "compute", "mps", "graphics"]),
        "name": st.none() | st.text(max_size=12).filter(lambda text: "\x00" not in text),
        "deployment_id": st.sampled_from([None, "ours", " ours", "0ours", "theirs", "x"]),
        "mig_device_uuid": st.sampled_from([None, "", "ours", "MIG-unknown-0000"]),
        "used_bytes_max": st.none() | st.integers(0, 10 * GIB),
        "used_bytes_last": st.none() | st.integers(0, 10 * GIB),
        "samples": st.none() | st.integers(0, 20),
        "allocator": _allocator,
    },
)


@pytest.fixture
def host_parts():
    card0 = GpuFactory(index=0, uuid="GPU-00000000-0000-4000-8000-00000000aa00")
    card1 = GpuFactory(host=card0.host, index=1, uuid="GPU-00000000-0000-4000-8000-00000000aa01")
    mig = MigSliceFactory(gpu=card1, uuid="MIG-00000000-0000-4000-8000-00000000bb01")
    ours = DeploymentFactory(host=card0.host)
    theirs = DeploymentFactory()
    return card0, card1, mig, ours, theirs


def _sent(position: int, spec: dict, parts) -> dict:
    card0, _, mig, ours, theirs = parts
    names = {
        "uuid0": {"card_uuid": card0.uuid, "card_index": 0},
        "index1": {"card_index": 1},
        "unknown_uuid_index1": {"card_uuid": UNKNOWN_CARD, "card_index": 1},
        "unknown": {"card_uuid": UNKNOWN_CARD},
        "index5": {"card_index": 5},
    }
    deployment = {"ours": str(ours.pk), " ours": f" {ours.pk}", "0ours": f"0{ours.pk}",
                  "theirs": str(theirs.pk)}  # fmt: skip
    row = {"pid": 100 + position, **names[spec["card"]]}
    for key, value in spec.items():
        if key == "deployment_id":
            value = deployment.get(value, value)
        elif key == "mig_device_uuid" and value == "ours":
            value = mig.uuid
        if key != "card":
            row[key] = value
    return row


def _read_row_by_row(row: dict, parts) -> tuple | None:
    """What the row must land as (in ProcessSample's fields), read the plain way."""
    card0, card1, mig, ours, _ = parts
    gpu = {card0.uuid: card0}.get(row.get("card_uuid")) or {0: card0, 1: card1}.get(
        row.get("card_index")
    )
    if gpu is None:
        return None
    try:
        deployment = int(row.get("deployment_id"))
    except (TypeError, ValueError):
        deployment = None
    allocator = row.get("allocator") or {}
    stats = allocator_from_batch(allocator) if allocator else None
    index = fragmentation_index(stats) if stats else None
    return (
        row["pid"], gpu.pk, row.get("kind") or "compute", row.get("name"),
        deployment if deployment == ours.pk else None,
        mig.pk if row.get("mig_device_uuid") == mig.uuid else None,
        row.get("used_bytes_max"), row.get("used_bytes_last"), row.get("samples") or 0,
        allocator.get("reserved_bytes"), allocator.get("allocated_bytes"),
        allocator.get("inactive_split_bytes"), allocator.get("largest_free_block_bytes"),
        None if index is None else pytest.approx(index.value, rel=1e-6),
    )  # fmt: skip


_FIELDS = ("pid", "gpu_id", "kind", "name", "deployment_id", "mig_slice_id", "used_max",
           "used_last", "samples", "alloc_reserved_last", "alloc_allocated_last",
           "alloc_inactive_split_last", "alloc_largest_free_last", "frag_index_max")  # fmt: skip


def _as_rows(payload: dict) -> dict:
    return payload


@pytest.mark.parametrize("form", [_as_rows, on_the_wire], ids=["rows", "columns"])
@hypothesis_settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(specs=st.lists(_row, max_size=6))
def test_each_row_lands_as_the_row_by_row_reading_says(host_parts, form, specs):
    rows = [_sent(position, spec, host_parts) for position, spec in enumerate(specs)]
    payload = batch(host_parts[0].host, start=T0.timestamp() - 10, end=T0.timestamp(),
                    processes=rows)  # fmt: skip
    (result,) = ingest_batches([json.loads(json.dumps(form(payload)))])
    assert isinstance(result, IngestResult), result
    expected = [r for r in (_read_row_by_row(row, host_parts) for row in rows) if r is not None]
    landed = ProcessSample.objects.filter(batch_id=uuid.UUID(payload["batch_id"]))
    assert sorted(landed.values_list(*_FIELDS)) == sorted(expected)
    assert result.rows == len(expected)


def test_an_event_of_a_columnar_batch_keeps_the_cards_processes_at_that_moment(host_parts):
    card = host_parts[0]
    as_compute = process_row(card, 12, used_max=29 * GIB, used_last=10 * GIB)
    payload = batch(
        card.host,
        start=T0.timestamp() - 10,
        end=T0.timestamp(),
        processes=[
            process_row(card, 11, used_max=50 * GIB, used_last=50 * GIB,
                        alloc={"reserved_bytes": 40 * GIB, "allocated_bytes": 39 * GIB}),
            as_compute,
            {**as_compute, "kind": "mps"},  # an MPS client NVML lists twice: once in the snapshot
        ],
        events=[{"ts": T0.timestamp() - 4, "kind": "oom", "card_index": 0, "card_uuid": card.uuid,
                 "detail": {"pid": 12, "requested_bytes": 2 * GIB}}],
    )  # fmt: skip
    (result,) = ingest_batches([json.loads(json.dumps(on_the_wire(payload)))])
    assert isinstance(result, IngestResult) and result.rows == 2
    snapshot = Event.objects.get().snapshot
    assert [(p["pid"], p["used_bytes"], p["allocator"]) for p in snapshot["processes"]] == [
        (11, 50 * GIB, {"reserved_bytes": 40 * GIB, "allocated_bytes": 39 * GIB}),
        (12, 29 * GIB, None),
    ]
