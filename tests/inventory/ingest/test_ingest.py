"""Batches from host agents land once, with their interval peaks, in samples and rollups."""

import datetime as dt
import json
import threading
import uuid
from pathlib import Path

import pytest
from django.db import connection, connections, transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from console.core.models import AuditEntry
from inventory.ingest.writer import BatchRejected, IngestResult, ingest_batch, ingest_batches
from inventory.models import (
    CardSample,
    CollectorFault,
    CollectorStatus,
    Event,
    Gpu,
    Host,
    IngestedBatch,
    ProcessSample,
)
from inventory.timeseries import partitions, rollups
from tests.batches import GIB, batch, card_row, engine_row, process_row
from tests.examples import examples
from tests.factories import DeploymentFactory, GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

# An hour ago, on a whole hour plus five seconds: ingest accepts only recent batches.
T0 = (
    (dt.datetime.now(tz=dt.UTC) - dt.timedelta(hours=1))
    .replace(minute=0, second=5, microsecond=0)
    .timestamp()
)
MIB = 1024**2
FIXTURES = Path(__file__).parents[2] / "fixtures"


def _rollup(table, **where):
    rollups.refresh_all()
    clauses = " AND ".join(f"{key} = %s" for key in where)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} WHERE {clauses}", list(where.values()))
        names = [col.name for col in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@pytest.fixture
def card():
    return GpuFactory(index=0)


def test_a_batch_lands_with_its_interval_peaks(card):
    deployment = DeploymentFactory(host=card.host, gpus=[card])
    payload = batch(
        card.host,
        start=T0 - 10,
        end=T0,
        cards=[card_row(card, used_max=70 * GIB, used_last=40 * GIB)],
        processes=[
            process_row(card, 4242, used_max=60 * GIB, used_last=30 * GIB, deployment=deployment)
        ],
    )
    result = ingest_batch(payload)
    assert not result.duplicate
    assert result.rows == 2
    sample = CardSample.objects.get(gpu=card)
    assert (sample.used_max, sample.used_last) == (70 * GIB, 40 * GIB)
    process = ProcessSample.objects.get(gpu=card)
    assert process.pid == 4242
    assert process.deployment_id == deployment.pk
    assert (process.used_max, process.used_last) == (60 * GIB, 30 * GIB)
    minute = _rollup("inventory_card_rollup_1m", gpu_id=card.pk)
    assert len(minute) == 1
    assert minute[0]["bucket"] == dt.datetime.fromtimestamp(T0 - 5, tz=dt.UTC)
    assert minute[0]["used_max"] == 70 * GIB


def test_a_redelivered_batch_writes_nothing_twice(card):
    payload = batch(
        card.host,
        start=T0 - 10,
        end=T0,
        cards=[card_row(card, used_max=10 * GIB, used_last=9 * GIB)],
        processes=[process_row(card, 1, used_max=GIB, used_last=GIB)],
        events=[
            {
                "ts": T0 - 3,
                "kind": "oom",
                "card_index": 0,
                "card_uuid": card.uuid,
                "detail": {"pid": 1},
            }
        ],
    )
    first = ingest_batch(payload)
    again = ingest_batch(payload)
    assert not first.duplicate and again.duplicate
    assert CardSample.objects.count() == 1
    assert ProcessSample.objects.count() == 1
    assert Event.objects.count() == 1
    assert IngestedBatch.objects.count() == 1
    assert _rollup("inventory_card_rollup_1h", gpu_id=card.pk)[0]["samples"] == 1
    assert CollectorStatus.objects.get(host=card.host).batches == 1


def test_rollups_keep_the_peak_and_add_up_the_rest(card):
    sampler = "7d3f2c1e-0000-4000-8000-000000000001"
    for seq, (used_max, used_last) in enumerate([(30, 20), (75, 10), (40, 40)], start=1):
        ingest_batch(
            batch(
                card.host,
                start=T0 + 10 * (seq - 1),
                end=T0 + 10 * seq,
                cards=[card_row(card, used_max=used_max * GIB, used_last=used_last * GIB)],
                seq=seq,
                sampler_id=sampler,
            )
        )
    minute = _rollup("inventory_card_rollup_1m", gpu_id=card.pk)[0]
    assert minute["samples"] == 3
    assert minute["used_max"] == 75 * GIB
    assert minute["used_sum"] == 70 * GIB
    assert minute["used_count"] == 3
    hour = _rollup("inventory_card_rollup_1h", gpu_id=card.pk)[0]
    assert hour["used_max"] == 75 * GIB


def test_an_engines_requests_keep_the_seconds_they_were_counted_over(card):
    deployment = DeploymentFactory(host=card.host, gpus=[card])
    sampler = "7d3f2c1e-0000-4000-8000-000000000002"

    def engine(latency):
        return engine_row(deployment, running=4, p99_s=0.5) | {"latency": {"e2e": latency}}

    counted = [
        {"count": 6000.0, "window_s": 600.0, "p99_s": 0.5},  # a 10-minute flush's requests
        {"count": 90.0, "p99_s": 0.5},  # an agent from before window_s: its 10 s interval
        {"count": 5.0, "window_s": 0.0, "p99_s": 0.5},  # counted over no time: no count
    ]
    for seq, latency in enumerate(counted, start=1):
        ingest_batch(
            batch(
                card.host,
                start=T0 + 10 * (seq - 1),
                end=T0 + 10 * seq,
                seq=seq,
                sampler_id=sampler,
                engines=[engine(latency)],
            )
        )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT requests, requests_window_s FROM inventory_engine_sample "
            "WHERE deployment_id = %s ORDER BY ts",
            [deployment.pk],
        )
        assert cursor.fetchall() == [(6000.0, 600.0), (90.0, 10.0), (None, None)]
    minute = _rollup("inventory_engine_rollup_1m", deployment_id=deployment.pk)[0]
    assert (minute["requests"], minute["requests_s"]) == (6090.0, 610.0)
    hour = _rollup("inventory_engine_rollup_1h", deployment_id=deployment.pk)[0]
    assert (hour["requests"], hour["requests_s"]) == (6090.0, 610.0)


def test_a_late_batch_is_folded_into_a_minute_already_rolled_up(card):
    sampler = "7d3f2c1e-0000-4000-8000-000000000003"
    ingest_batch(batch(card.host, start=T0 + 10, end=T0 + 20, seq=2, sampler_id=sampler,
                       cards=[card_row(card, used_max=20 * GIB, used_last=20 * GIB)]))  # fmt: skip
    assert _rollup("inventory_card_rollup_1m", gpu_id=card.pk)[0]["used_max"] == 20 * GIB
    # The batch before it arrives late, after a broker outage, with the minute's real peak.
    ingest_batch(batch(card.host, start=T0, end=T0 + 10, seq=1, sampler_id=sampler,
                       cards=[card_row(card, used_max=70 * GIB, used_last=30 * GIB)]))  # fmt: skip
    minute = _rollup("inventory_card_rollup_1m", gpu_id=card.pk)[0]
    assert (minute["used_max"], minute["samples"], minute["used_sum"]) == (70 * GIB, 2, 50 * GIB)
    assert _rollup("inventory_card_rollup_1h", gpu_id=card.pk)[0]["used_max"] == 70 * GIB
    assert rollups.refresh_all() == 0  # nothing left dirty; refreshing again changes nothing


def test_sequence_gaps_count_as_missing_batches(card):
    sampler = "7d3f2c1e-0000-4000-8000-000000000002"
    for seq in (1, 2, 5):
        ingest_batch(
            batch(card.host, start=T0 + seq, end=T0 + seq + 1, seq=seq, sampler_id=sampler)
        )
    status = CollectorStatus.objects.get(host=card.host)
    assert status.last_seq == 5
    assert status.missing_batches == 2
    assert status.last_sample_at == dt.datetime.fromtimestamp(T0 + 6, tz=dt.UTC)


def test_a_late_batch_of_a_gap_is_no_longer_missing(card):
    sampler = "7d3f2c1e-0000-4000-8000-000000000003"
    for seq in (1, 2, 5, 3, 3):  # 3 and 4 late; 3 redelivered once more
        payload = batch(card.host, start=T0 + seq, end=T0 + seq + 1, seq=seq, sampler_id=sampler)
        ingest_batch({**payload, "batch_id": f"00000000-0000-4000-8000-00000000000{seq}"})
    status = CollectorStatus.objects.get(host=card.host)
    assert (status.last_seq, status.missing_batches) == (5, 1)  # 4 is still missing


def test_a_late_batch_of_the_agent_before_its_restart_does_not_take_the_status_back(card):
    before, after = (f"7d3f2c1e-0000-4000-8000-00000000001{n}" for n in (1, 2))
    ingest_batch(batch(card.host, start=T0, end=T0 + 10, seq=7, sampler_id=before))
    ingest_batch(batch(card.host, start=T0 + 20, end=T0 + 30, seq=1, sampler_id=after))
    ingest_batch(batch(card.host, start=T0 + 10, end=T0 + 20, seq=8, sampler_id=before))
    ingest_batch(batch(card.host, start=T0 + 30, end=T0 + 40, seq=3, sampler_id=after))
    status = CollectorStatus.objects.get(host=card.host)
    assert (str(status.sampler_id), status.last_seq) == (after, 3)
    assert status.missing_batches == 1  # seq 2 of the new sampler


def test_an_event_keeps_the_cards_processes_at_that_moment(card):
    ingest_batch(
        batch(
            card.host,
            start=T0 - 10,
            end=T0,
            processes=[
                process_row(card, 11, used_max=50 * GIB, used_last=50 * GIB),
                process_row(card, 12, used_max=29 * GIB, used_last=10 * GIB),
            ],
            events=[
                {
                    "ts": T0 - 4,
                    "kind": "oom",
                    "card_index": 0,
                    "card_uuid": card.uuid,
                    "detail": {"pid": 12, "requested_bytes": 2 * GIB},
                }
            ],
        )
    )
    event = Event.objects.get()
    assert event.kind == Event.Kind.OOM
    assert event.gpu == card
    assert {p["pid"]: p["used_bytes"] for p in event.snapshot["processes"]} == {
        11: 50 * GIB,
        12: 29 * GIB,
    }


def test_xid_79_is_recorded_as_a_lost_gpu(card):
    ingest_batch(
        batch(
            card.host,
            start=T0 - 10,
            end=T0,
            events=[
                {
                    "ts": T0 - 1,
                    "kind": "xid",
                    "card_index": 0,
                    "card_uuid": card.uuid,
                    "detail": {"xid": 79},
                }
            ],
        )
    )
    event = Event.objects.get()
    assert (event.kind, event.xid) == (Event.Kind.GPU_LOST, 79)


def test_faults_are_kept_and_counted(card):
    ingest_batch(
        batch(
            card.host,
            start=T0 - 10,
            end=T0,
            faults=[
                {
                    "card_index": 0,
                    "card_uuid": card.uuid,
                    "call": "nvmlDeviceGetMemoryInfo",
                    "error": "NVMLError_GpuIsLost",
                    "message": "GPU is lost",
                    "count": 7,
                    "first_ts": T0 - 9,
                    "last_ts": T0 - 1,
                }
            ],
        )
    )
    fault = CollectorFault.objects.get()
    assert (fault.gpu, fault.error, fault.count) == (card, "NVMLError_GpuIsLost", 7)
    assert CollectorStatus.objects.get(host=card.host).faults_total == 7


def test_an_unknown_card_is_discovered_and_audited():
    host = HostFactory()
    new_card = Gpu(
        host=host,
        index=3,
        uuid="GPU-11111111-2222-3333-4444-555555555555",
        product_name="NVIDIA H200",
    )
    ingest_batch(
        batch(
            host,
            start=T0 - 10,
            end=T0,
            cards=[card_row(new_card, used_max=GIB, used_last=GIB, total=140 * GIB)],
        )
    )
    gpu = Gpu.objects.get(uuid=new_card.uuid)
    assert (gpu.host, gpu.index, gpu.memory_total_bytes) == (host, 3, 140 * GIB)
    entry = AuditEntry.objects.get(action="gpu.discover")
    assert entry.actor_name == "system" and entry.host == host
    assert CardSample.objects.get().gpu == gpu


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda p: p.update(host="no-such-host"), "unknown host"),
        (lambda p: p.update(schema="v0"), "schema 'v0', expected"),
        (lambda p: p.pop("batch_id"), "batch_id: expected a UUID"),
        (lambda p: p.update(batch_id="not-a-uuid"), "is not a UUID"),
        (lambda p: p.update(interval_end=p["interval_start"] - 1), "before interval_start"),
    ],
)
def test_bad_batches_are_refused_with_the_reason(card, mutate, reason):
    payload = batch(card.host, start=T0 - 10, end=T0)
    mutate(payload)
    with pytest.raises(BatchRejected, match=reason):
        ingest_batch(payload)
    assert not IngestedBatch.objects.exists()


def test_fragmentation_comes_from_the_allocator_not_nvidia_smi(card):
    alloc = {
        "reserved_bytes": 40 * GIB,
        "allocated_bytes": 30 * GIB,
        "inactive_split_bytes": 6 * GIB,
        "largest_free_block_bytes": 2 * GIB,
    }
    ingest_batch(
        batch(
            card.host,
            start=T0 - 10,
            end=T0,
            cards=[card_row(card, used_max=41 * GIB, used_last=41 * GIB)],
            processes=[process_row(card, 5, used_max=41 * GIB, used_last=41 * GIB, alloc=alloc)],
        )
    )
    # 10 GiB free inside the pool, largest block 2 GiB: 1 - 2/10.
    assert ProcessSample.objects.get().frag_index_max == pytest.approx(0.8)
    assert CardSample.objects.get().frag_index_max == pytest.approx(0.8)


def test_old_partitions_are_dropped_whole(card):
    old = dt.datetime(2026, 7, 1, 12, tzinfo=dt.UTC)
    ingest_batches(
        [
            batch(
                card.host,
                start=old.timestamp() - 10,
                end=old.timestamp(),
                cards=[card_row(card, used_max=GIB, used_last=GIB)],
            )
        ],
        now=old.timestamp(),  # written back then, kept since
    )
    ingest_batch(
        batch(card.host, start=T0 - 10, end=T0, cards=[card_row(card, used_max=GIB, used_last=GIB)])
    )
    rollups.refresh_all()  # as maintain_partitions does before it drops anything
    dropped = partitions.drop_expired(dt.datetime.fromtimestamp(T0, tz=dt.UTC))
    assert "inventory_card_sample_p20260701" in dropped
    assert "inventory_card_rollup_1m_p20260701" in dropped
    assert "inventory_card_rollup_1h_p202607" not in dropped  # kept two years
    assert CardSample.objects.count() == 1
    assert _rollup("inventory_card_rollup_1h", gpu_id=card.pk, bucket=old)


def test_a_minute_whose_samples_aged_out_keeps_its_rollups(card):
    old = dt.datetime.now(tz=dt.UTC) - dt.timedelta(days=30)
    ingest_batches([batch(card.host, start=old.timestamp() - 10, end=old.timestamp(),
                          cards=[card_row(card, used_max=GIB, used_last=GIB)])],
                   now=old.timestamp())  # fmt: skip
    assert _rollup("inventory_card_rollup_1m", gpu_id=card.pk)[0]["used_max"] == GIB
    # Its raw samples are gone; a stray dirty mark must not wipe what was rolled up.
    CardSample.objects.all().delete()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO inventory_rollup_dirty VALUES (%s)", [old.replace(second=0, microsecond=0)]
        )
    assert rollups.refresh_all() == 1
    assert _rollup("inventory_card_rollup_1m", gpu_id=card.pk)[0]["used_max"] == GIB


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_refreshes_take_turns(card):
    sampler = "7d3f2c1e-0000-4000-8000-000000000004"
    for seq in (1, 7):  # two minutes of the same hour: both refreshes rebuild that hour
        start = T0 + 10 * (seq - 1)
        cards = [card_row(card, used_max=seq * GIB, used_last=GIB)]
        ingest_batch(batch(card.host, start=start, end=start + 10, seq=seq, sampler_id=sampler,
                           cards=cards))  # fmt: skip
    refreshed = []

    def refresh_in_another_session():
        try:
            refreshed.append(rollups.refresh())
        finally:
            connections.close_all()

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [rollups.REFRESH_LOCK])
        other = threading.Thread(target=refresh_in_another_session)
        other.start()
        other.join(timeout=1)
        assert other.is_alive() and not refreshed  # it waits for the refresh holding the lock
    other.join(timeout=10)
    assert refreshed == [2]
    hour = _rollup("inventory_card_rollup_1h", gpu_id=card.pk)
    assert [(row["samples"], row["used_max"]) for row in hour] == [(2, 7 * GIB)]


def test_an_mps_client_listed_twice_lands_once_as_mps(card):
    """NVML lists an MPS client in its compute and its MPS list (docs/gpu-check.md)."""
    as_compute = process_row(card, 468, used_max=GIB, used_last=GIB)
    as_client = {**as_compute, "kind": "mps"}
    other = process_row(card, 470, used_max=66 * MIB, used_last=66 * MIB)
    payload = batch(card.host, start=T0 - 10, end=T0, processes=[as_compute, other, as_client])
    assert ingest_batch(payload).rows == 2
    rows = ProcessSample.objects.filter(gpu=card).order_by("pid")
    assert [(row.pid, row.kind, row.used_max) for row in rows] == [
        (468, "mps", GIB),
        (470, "compute", 66 * MIB),
    ]


def test_batches_a_host_agent_published_on_a_real_h200_land_with_their_peak():
    """The batches of the H200 run in docs/gpu-check.md, moved in time to T0."""
    payloads = json.loads((FIXTURES / "nvml-h200" / "agent-batches.json").read_text())
    shift = T0 - payloads[-1]["interval_end"]
    for payload in payloads:
        payload["interval_start"] += shift
        payload["interval_end"] += shift
        for process in payload["processes"]:
            process["first_seen"] += shift
            process["last_seen"] += shift
    host = HostFactory(name=payloads[0]["host"])
    for payload in payloads:
        ingest_batch(payload)
    gpu = Gpu.objects.get(host=host)
    assert (gpu.product_name, gpu.memory_total_bytes) == ("NVIDIA H200", 143771 * MIB)
    series = ProcessSample.objects.filter(gpu=gpu).order_by("ts")
    assert [(s.used_max // MIB, s.used_last // MIB, s.samples) for s in series] == [
        (5638, 1542, 17),
        (1542, 1542, 16),
        (1542, 1542, 7),
    ]
    minutes = _rollup("inventory_process_rollup_1m", gpu_id=gpu.pk)
    assert max(minute["used_max"] for minute in minutes) // MIB == 5638


_HOSTILE_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=10,
)  # fmt: skip
_HOSTILE_PATHS = st.sampled_from(
    [("seq",), ("interval_end",), ("cards",), ("cards", 0), ("cards", 0, "index"),
     ("cards", 0, "uuid"), ("cards", 0, "total_bytes"), ("cards", 0, "used_bytes_max"),
     ("processes", 0), ("processes", 0, "pid"), ("processes", 0, "card_uuid"),
     ("processes", 0, "used_bytes_max"), ("processes", 0, "allocator"),
     ("processes", 0, "deployment_id"), ("events",), ("faults",), ("agent",), ("engines",),
     ("host",)]
)  # fmt: skip


@pytest.mark.django_db
@hypothesis_settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(path=_HOSTILE_PATHS, value=_HOSTILE_VALUES)
def test_ingest_answers_any_batch_with_a_result_or_a_reason_never_an_error(path, value):
    host = Host.objects.get_or_create(name="vm", collector=Host.Collector.NVML)[0]
    payload = json.loads((FIXTURES / "nvml-h200" / "agent-batches.json").read_text())[1]
    shift = T0 - payload["interval_end"]
    payload["interval_start"] += shift
    payload["interval_end"] += shift
    payload["batch_id"] = str(uuid.uuid4())
    target = payload
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    (result,) = ingest_batches([payload])
    assert isinstance(result, BatchRejected | IngestResult)
    if isinstance(result, IngestResult) and not result.duplicate:
        assert CollectorStatus.objects.filter(host=host).exists()


def test_batches_bringing_a_new_card_create_it_once_and_a_rival_at_its_index_is_refused():
    host = HostFactory()
    new = Gpu(host=host, index=3, uuid="GPU-11111111-2222-3333-4444-555555555555")
    rival = Gpu(host=host, index=3, uuid="GPU-99999999-2222-3333-4444-555555555555")

    def bringing(gpu, start):
        return batch(
            host,
            start=start - 10,
            end=start,
            cards=[card_row(gpu, used_max=GIB, used_last=GIB, total=140 * GIB)],
            processes=[process_row(gpu, 7, used_max=GIB, used_last=GIB)],
        )

    results = ingest_batches([bringing(new, T0), bringing(new, T0 + 10), bringing(rival, T0 + 20)])
    outcomes = [r.code if isinstance(r, BatchRejected) else r.duplicate for r in results]
    assert outcomes == [False, False, "card_conflict"]
    assert results[2].path == "cards[0].uuid"
    gpu = Gpu.objects.get(host=host)
    assert gpu.uuid == new.uuid
    assert AuditEntry.objects.filter(action="gpu.discover").count() == 1
    assert ProcessSample.objects.filter(gpu=gpu).count() == 2


def test_a_batch_naming_another_hosts_card_is_refused_and_its_group_still_written(card):
    # The card is named by a host of the group and is another host's: only a look-up beyond
    # the group's own cards finds it.
    other = GpuFactory()
    mine = batch(card.host, start=T0 - 10, end=T0,
                 cards=[card_row(card, used_max=GIB, used_last=GIB)])  # fmt: skip
    theirs = {**card_row(other, used_max=GIB, used_last=GIB), "index": 5}
    forged = batch(card.host, start=T0, end=T0 + 10, cards=[theirs])
    written, refused = ingest_batches([mine, forged])
    assert not written.duplicate
    assert (refused.code, refused.says, refused.path) == (
        "card_conflict",
        "card_conflict.other_host",
        "cards[0].uuid",
    )
    assert Gpu.objects.get(uuid=other.uuid).host == other.host
    assert list(CardSample.objects.values_list("gpu", flat=True)) == [card.pk]


def test_a_batch_id_in_another_spelling_is_the_same_batch(card):
    payload = batch(card.host, start=T0 - 10, end=T0,
                    cards=[card_row(card, used_max=GIB, used_last=GIB)])  # fmt: skip
    shouted = dict(payload, batch_id=payload["batch_id"].upper())
    first, again = ingest_batches([shouted]), ingest_batches([payload])
    assert not first[0].duplicate and first[0].batch_id == payload["batch_id"]
    assert again[0].duplicate
    assert CardSample.objects.count() == 1
    assert CollectorStatus.objects.get(host=card.host).batches == 1


def test_a_claim_lost_to_another_writer_undoes_the_group_and_writes_the_rest_once(
    card, monkeypatch
):
    from inventory.ingest import writer as ingest

    def interval(start):
        return batch(card.host, start=start - 10, end=start,
                     cards=[card_row(card, used_max=GIB, used_last=GIB)],
                     processes=[process_row(card, 1, used_max=GIB, used_last=GIB)])  # fmt: skip

    taken, fresh = interval(T0), interval(T0 + 10)
    ingest_batch(taken)
    # The other writer commits the first batch after this one looked its id up.
    _stale_first_look_up(monkeypatch, ingest)
    results = ingest_batches([taken, fresh])
    assert [r.duplicate for r in results] == [True, False]
    assert ProcessSample.objects.count() == CardSample.objects.count() == 2
    assert IngestedBatch.objects.count() == 2
    assert CollectorStatus.objects.get(host=card.host).batches == 2


def _stale_first_look_up(monkeypatch, ingest):
    """The first look-up of the written batch ids finds none, as one made just before another
    writer committed them would; the look-ups after it are real."""
    real, calls = ingest._written_before, []

    def stale_first(payloads):
        calls.append(payloads)
        return {} if len(calls) == 1 else real(payloads)

    monkeypatch.setattr(ingest, "_written_before", stale_first)


def test_a_batch_id_another_host_claimed_meanwhile_is_refused_as_a_clash(card, monkeypatch):
    from inventory.ingest import writer as ingest

    other = GpuFactory()
    theirs = batch(other.host, start=T0 - 10, end=T0,
                   cards=[card_row(other, used_max=GIB, used_last=GIB)])  # fmt: skip
    ingest_batch(theirs)
    mine = {**batch(card.host, start=T0 - 10, end=T0,
                    cards=[card_row(card, used_max=GIB, used_last=GIB)]),
            "batch_id": theirs["batch_id"]}  # fmt: skip
    _stale_first_look_up(monkeypatch, ingest)
    (result,) = ingest_batches([mine])
    assert result.code == "batch_id_clash"
    assert not CardSample.objects.filter(gpu=card).exists()


@pytest.mark.parametrize(
    "spelling",
    [lambda key: f"urn:uuid:{key}", lambda key: "{" + key.upper() + "}", str.upper],
)
def test_a_batch_and_sampler_id_in_any_spelling_the_check_lets_in_are_written(card, spelling):
    payload = batch(card.host, start=T0 - 10, end=T0,
                    cards=[card_row(card, used_max=GIB, used_last=GIB)])  # fmt: skip
    key = payload["batch_id"]
    payload |= {"batch_id": spelling(key), "sampler_id": spelling(payload["sampler_id"])}
    (result,) = ingest_batches([payload])
    assert not result.duplicate and result.batch_id == key
    assert IngestedBatch.objects.get().batch_id == uuid.UUID(key)


def test_a_resent_batch_does_not_bring_back_a_card_removed_since():
    host = HostFactory()
    old = Gpu(host=host, index=3, uuid="GPU-11111111-2222-3333-4444-555555555555")
    new = Gpu(host=host, index=3, uuid="GPU-99999999-2222-3333-4444-555555555555")

    def bringing(gpu, start):
        return batch(host, start=start - 10, end=start,
                     cards=[card_row(gpu, used_max=GIB, used_last=GIB)])  # fmt: skip

    first = bringing(old, T0)
    ingest_batch(first)
    Gpu.objects.filter(uuid=old.uuid).delete()  # the card was replaced, its record removed
    resent, replacement = ingest_batches([first, bringing(new, T0 + 10)])
    assert resent.duplicate and not replacement.duplicate
    assert list(Gpu.objects.filter(host=host).values_list("uuid", flat=True)) == [new.uuid]


def test_a_card_another_writer_created_meanwhile_is_no_conflict(monkeypatch):
    from inventory.ingest import writer as ingest

    host = HostFactory()
    gpu = GpuFactory(host=host, index=2)
    # The card was created after this writer read the cards it knows.
    monkeypatch.setattr(ingest, "_known_cards", lambda payloads, maps_of: {})
    (result,) = ingest_batches(
        [batch(host, start=T0 - 10, end=T0, cards=[card_row(gpu, used_max=GIB, used_last=GIB)])]
    )
    assert not result.duplicate
    assert CardSample.objects.get().gpu == gpu


def test_a_gap_closes_when_its_batch_comes_after_the_agent_restarted(card):
    # A killed ingest worker's group comes back after the visibility timeout, behind the
    # batches of the agent's next process.
    before, after = (f"7d3f2c1e-0000-4000-8000-00000000002{n}" for n in (1, 2))
    ingest_batch(batch(card.host, start=T0, end=T0 + 10, seq=1, sampler_id=before))
    ingest_batch(batch(card.host, start=T0 + 20, end=T0 + 30, seq=3, sampler_id=before))
    ingest_batch(batch(card.host, start=T0 + 30, end=T0 + 40, seq=1, sampler_id=after))
    assert CollectorStatus.objects.get(host=card.host).missing_batches == 1
    ingest_batch(batch(card.host, start=T0 + 10, end=T0 + 20, seq=2, sampler_id=before))
    status = CollectorStatus.objects.get(host=card.host)
    assert (status.missing_batches, str(status.sampler_id), status.last_seq) == (0, after, 1)


def test_a_late_batch_before_a_samplers_first_seen_opens_the_gap_between(card):
    sampler = "7d3f2c1e-0000-4000-8000-000000000031"
    for seq in (5, 6, 3):
        ingest_batch(
            batch(card.host, start=T0 + seq, end=T0 + seq + 1, seq=seq, sampler_id=sampler)
        )
    assert CollectorStatus.objects.get(host=card.host).missing_batches == 1  # seq 4
