"""Samples and minute rollups packed an hour a row: every reader answers what it answered from
the rows, to the last bit, before and after packing, with late batches folded in."""

import datetime as dt
import uuid

import pytest
from django.db import connection
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from inventory.ingest import samples
from inventory.timeseries import alert_facts, operations, packing, partitions, queries, rollups
from tests.examples import examples
from tests.factories import DeploymentFactory, GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

# Three whole hours, the first starting two days ago: old enough to pack, young enough for
# every retention.
HOUR0 = (dt.datetime.now(tz=dt.UTC) - dt.timedelta(days=2)).replace(
    minute=0, second=0, microsecond=0
)
SPAN_S = 3 * 3600
MIG_SLICE = 9001

_bytes = st.one_of(st.none(), st.integers(0, 2**46))
_real = st.one_of(st.none(), st.floats(0, 1e6, width=32), st.sampled_from((0.1, 1.7, 1e-3)))
_small = st.one_of(st.none(), st.integers(0, 100))
# One agent interval of the host: when (seconds into the span, with microseconds), and per
# card its figures and its processes.
_card = st.tuples(_bytes, _bytes, _small, _real, st.booleans())
_process = st.tuples(st.integers(1000, 1003), st.integers(0, 2), _bytes, _bytes, _real)
_engine = st.tuples(_real, _real, _real, _real, _bytes)
_interval = st.tuples(
    st.integers(0, SPAN_S * 1_000_000 - 1),
    st.lists(st.tuples(_card, st.lists(_process, max_size=3, unique_by=lambda p: p[0])),
             min_size=2, max_size=2),
    st.lists(_engine, min_size=3, max_size=3),
)  # fmt: skip
_intervals = st.lists(_interval, max_size=12, unique_by=lambda i: i[0])


@pytest.fixture
def host():
    host = HostFactory(collector="agent")
    gpus = [GpuFactory(host=host, index=i) for i in range(2)]
    deployments = [DeploymentFactory(host=host, gpus=gpus) for _ in range(3)]
    partitions.ensure_partitions(HOUR0, HOUR0 + dt.timedelta(seconds=SPAN_S))
    return host, gpus, deployments


def _write(host, intervals) -> list:
    written_for, gpus, deployments = host
    cards, processes, engines, migs, times = [], [], [], [], set()
    for offset_us, per_card, per_engine in intervals:
        ts = HOUR0 + dt.timedelta(microseconds=offset_us)
        batch_id = uuid.uuid4()
        times.add((ts, written_for.pk, batch_id))
        for gpu, ((used, free, util, frag, lost), procs) in zip(gpus, per_card, strict=True):
            cards.append((gpu.pk, ts, batch_id, 10.0, 10, lost, 80 * 2**30, used, used, 479,
                          free, free, util, util, util, frag))  # fmt: skip
            for pid, d, nvml, reserved, pfrag in procs:
                processes.append((gpu.pk, ts, batch_id, pid, "compute", f"python{pid}",
                                  deployments[d].pk, MIG_SLICE if pid == 1003 else None, nvml,
                                  nvml, 10, reserved, reserved and reserved // 2, 7, None,
                                  pfrag))  # fmt: skip
        for deployment, (kv, running, waiting, p99, pool) in zip(
            deployments, per_engine, strict=True
        ):
            engines.append((deployment.pk, ts, batch_id, kv, kv, running, running, waiting,
                            waiting, pool, running, 10.0 if running else None, p99, p99, p99,
                            pool, pool, kv))  # fmt: skip
        migs.append((MIG_SLICE, ts, batch_id, 10 * 2**30, 2**30, 2**30, 9 * 2**30))
    if times:
        samples.write_processes(processes)
        samples.write(cards, engines, migs, times)
    rollups.refresh_all()
    return [row[2] for row in cards]


# Windows over the span and around it: whole, inside one hour, across an hour's end.
WINDOWS = [(-600, SPAN_S + 600), (900, 2700), (3000, 7800)]


def _readers(host, batch_ids, window) -> dict:
    _, gpus, deployments = host
    gpu_ids = [gpu.pk for gpu in gpus]
    deployment_ids = [d.pk for d in deployments]
    start, end = (HOUR0 + dt.timedelta(seconds=edge) for edge in window)
    within = end - start
    now = dt.datetime.now(tz=dt.UTC)
    age = now - start
    found = {
        "card_series": queries.card_series(gpu_ids, start, end, 10, queries.RAW),
        "card_series_1m": queries.card_series(gpu_ids, start, end, 300, queries.MINUTE),
        "process_series": queries.process_series(gpu_ids, start, end, 30, queries.RAW),
        "process_series_1m": queries.process_series(gpu_ids, start, end, 600, queries.MINUTE),
        "deployment_memory": queries.deployment_memory_series(gpu_ids, start, end, 60, queries.RAW),
        "latest_cards": queries.latest_card_samples(gpu_ids, age),
        "latest_memory": queries.latest_process_memory(gpu_ids, age),
        "cards_at": queries.card_samples_at(gpu_ids, end, within),
        "processes_of_batches": sorted(
            queries.process_samples_of_batches(gpu_ids, batch_ids, start, end),
            key=lambda row: repr(sorted(row.items())),
        ),
        "mig_of_batches": queries.mig_samples_of_batches([MIG_SLICE], batch_ids, start, end),
        "kv_at": queries.engine_kv_at(deployment_ids, end, within),
        "driver_reserved": [queries.driver_reserved_at(g, end) for g in gpu_ids],
        "demand": sorted(
            queries.deployment_demand(gpu_ids[0], start, end),
            key=lambda r: (r["ts"], r["deployment_id"]),
        ),
        "engine_minutes": queries.engine_minutes(deployment_ids, start, end),
        "requests": queries.engine_requests_counted(deployment_ids, start, end),
        "p95": queries.running_percentile(deployment_ids, start, end, 95),
        "latency": queries.latency_p99_series(deployment_ids, start, end, 300),
        "used_samples": queries.card_used_samples(gpu_ids, start, end),
        "newest": queries.newest_card_sample_at(gpu_ids),
        "pids": operations.process_pids_since(gpu_ids[1], start),
        "allocator": operations.allocator_now(gpu_ids, start),
        "alert_cards": [r for r in alert_facts.cards_now(start) if r["gpu_id"] in gpu_ids],
        "alert_tenants": [
            r for r in alert_facts.card_tenants_now(start, start) if r["gpu_id"] in gpu_ids
        ],
        "memory_minutes": [
            (g, d, a.tolist(), u.tolist())
            for g, d, a, u in queries.deployment_memory_minutes(gpu_ids, start)
        ],
    }
    with connection.cursor() as cursor:
        for table in ("card_rollup_1h", "process_rollup_1h", "engine_rollup_1h"):
            cursor.execute(f"SELECT * FROM inventory_{table} ORDER BY 1, 2, 3")
            found[table] = cursor.fetchall()
    return found


def _everything(host, batch_ids) -> list[dict]:
    return [_readers(host, batch_ids, window) for window in WINDOWS]


def _assert_same(found: list[dict], expected: list[dict]) -> None:
    for window, got, want in zip(WINDOWS, found, expected, strict=True):
        for reader in want:
            assert got[reader] == want[reader], f"{reader} over {window}"


def _rows_left() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT " + " + ".join(f"(SELECT count(*) FROM {t.table})" for t in packing.TABLES)
        )
        return cursor.fetchone()[0]


@hypothesis_settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(first=_intervals, late=_intervals)
def test_every_reader_answers_the_same_from_packs_as_from_rows(host, first, late):
    with connection.cursor() as cursor:
        for table in packing.TABLES:
            cursor.execute(f"DELETE FROM {table.table}")
            cursor.execute(f"DELETE FROM {table.pack}")
        for table in ("card_rollup_1h", "process_rollup_1h", "engine_rollup_1h",
                      "memory_minutes_1h", "engine_minutes_1h"):  # fmt: skip
            cursor.execute(f"DELETE FROM inventory_{table}")
    batch_ids = _write(host, first)
    as_rows = _everything(host, batch_ids)
    packing.pack_all()
    assert _rows_left() == 0 or not first
    _assert_same(_everything(host, batch_ids), as_rows)

    # A late batch lands as rows in hours already packed; its minutes are rolled up again.
    late = [interval for interval in late if interval[0] not in {i[0] for i in first}]
    batch_ids += _write(host, late)
    beside_packs = _everything(host, batch_ids)
    packing.pack_all()
    assert _rows_left() == 0 or not (first or late)
    _assert_same(_everything(host, batch_ids), beside_packs)
    # ... and the rollups it gave are the ones a refresh of every minute from scratch gives.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO inventory_rollup_dirty (bucket) SELECT generate_series(%s::timestamptz,"
            " %s::timestamptz, interval '1 minute') ON CONFLICT DO NOTHING",
            [HOUR0, HOUR0 + dt.timedelta(seconds=SPAN_S)],
        )
    rollups.refresh_all()
    _assert_same(_everything(host, batch_ids), beside_packs)


def test_the_newest_interval_is_read_from_rows_without_opening_a_pack(host):
    _, gpus, _ = host
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM inventory_card_samples("
            "now() - interval '5 minutes', 'infinity') WHERE gpu_id = %s",
            [gpus[0].pk],
        )
        plan = str(cursor.fetchone()[0])
    # Inlined (the reader's WHERE reached the rows' index) and the packs' half never ran.
    assert "Function Scan on inventory_card_samples" not in plan
    assert "One-Time Filter" in plan and "'Actual Loops': 0" in plan.replace('"', "'")
    # The newest sample of the last minutes: the packs are not even planned.
    now = dt.datetime.now(tz=dt.UTC)
    assert not packing.packs_may_hold(now - dt.timedelta(minutes=5))
    assert packing.packs_may_hold(now - packing.HOT_AFTER)
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN SELECT * FROM inventory_card_sample_newest(%s, %s, 'infinity', false)",
            [gpus[0].pk, now - dt.timedelta(minutes=5)],
        )
        assert "_pack" not in "\n".join(row[0] for row in cursor.fetchall())


def test_packing_moves_closed_hours_only_and_empties_the_days_it_finished(host):
    written_for, gpus, _ = host
    now = dt.datetime.now(tz=dt.UTC)
    partitions.ensure_partitions(now - dt.timedelta(days=1), now)
    old = (HOUR0 + dt.timedelta(minutes=5)).timestamp()
    recent = now - dt.timedelta(minutes=1)
    rows = [(gpus[0].pk, moment, uuid.uuid4(), 10.0, 10, False, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0.5)
            for moment in (dt.datetime.fromtimestamp(old, dt.UTC), recent)]  # fmt: skip
    samples.write(rows, None, None, {(row[1], written_for.pk, row[2]) for row in rows})
    rollups.refresh_all()
    packing.pack_all()
    with connection.cursor() as cursor:
        cursor.execute("SELECT ts FROM inventory_card_sample")
        assert [row[0] for row in cursor.fetchall()] == [recent]
        cursor.execute("SELECT hour, n FROM inventory_card_sample_pack")
        assert cursor.fetchall() == [(HOUR0, 1)]
        cursor.execute("SELECT pg_relation_size(%s)", [f"inventory_card_sample_p{HOUR0:%Y%m%d}"])
        assert cursor.fetchone()[0] == 0


def test_a_pack_step_is_bounded_by_its_keys(host, monkeypatch):
    written_for, gpus, _ = host
    monkeypatch.setattr(packing, "KEYS_PER_STEP", 1)
    ts = HOUR0 + dt.timedelta(minutes=1)
    batch_id = uuid.uuid4()
    rows = [(gpu.pk, ts, batch_id, 10.0, 10, False, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0.5)
            for gpu in gpus]  # fmt: skip
    samples.write(rows, None, None, {(ts, written_for.pk, batch_id)})
    rollups.refresh_all()
    first = packing.pack_step(packing.CARD, HOUR0)
    assert (first.first_key, first.packs) == (gpus[0].pk, 1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT gpu_id FROM inventory_card_sample")
        assert [row[0] for row in cursor.fetchall()] == [gpus[1].pk]
    second = packing.pack_step(packing.CARD, HOUR0, first.first_key)
    assert second.first_key == gpus[1].pk
    assert packing.pack_step(packing.CARD, HOUR0, second.first_key) is None
