"""The hourly packs of the minute rollups that the host page's analyses read: the same minutes
and figures as the minute rows, kept so by every refresh, aged out with them."""

import datetime as dt

import numpy as np
import pytest
from django.conf import settings
from django.db import connection
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from inventory.ingest.writer import ingest_batch
from inventory.timeseries import partitions, queries, rollups
from tests.batches import GIB, batch, card_row, engine_row, process_row
from tests.examples import examples
from tests.factories import DeploymentFactory, GpuFactory

pytestmark = pytest.mark.django_db

# Three whole hours of minutes, the first starting two days ago: the windows below start and
# end inside them.
HOUR0 = (dt.datetime.now(tz=dt.UTC) - dt.timedelta(days=2)).replace(
    minute=0, second=0, microsecond=0
)
MINUTES = 180
CARDS = (11, 12)
DEPLOYMENTS = (21, 22, 23)

# A minute of a process: card, PID, deployment (or none), peak (or none).
_process_minutes = st.lists(
    st.tuples(
        st.integers(0, MINUTES - 1),
        st.sampled_from(CARDS),
        st.integers(1000, 1003),
        st.sampled_from((*DEPLOYMENTS, None)),
        st.one_of(st.none(), st.integers(0, 2**40)),
    ),
    max_size=60,
    unique_by=lambda row: row[:3],
)
# A figure a `real` column cannot hold exactly (0.1), a large one, none: the text form counts.
_real = st.one_of(st.none(), st.floats(0, 1e6, width=32), st.sampled_from((0.1, 1.7, 1e-3)))
_engine_minutes = st.lists(
    st.tuples(st.integers(0, MINUTES - 1), st.sampled_from(DEPLOYMENTS), _real, _real),
    max_size=60,
    unique_by=lambda row: row[:2],
)
# Windows from before the first hour to after the last, on half minutes: some start or end on
# a minute's start (a minute at the start is outside, one at the end inside), most in an hour.
_window = st.tuples(st.integers(-123, 360), st.integers(0, 400)).map(
    lambda edges: (
        HOUR0 + dt.timedelta(seconds=30 * edges[0]),
        HOUR0 + dt.timedelta(seconds=30 * (edges[0] + edges[1])),
    )
)


def _minute(offset: int) -> dt.datetime:
    return HOUR0 + dt.timedelta(minutes=offset)


def _write(processes, engines) -> None:
    with connection.cursor() as cursor:
        for table in ("process_rollup_1m", "engine_rollup_1m", "memory_minutes_1h",
                      "engine_minutes_1h"):  # fmt: skip
            cursor.execute(f"DELETE FROM inventory_{table}")
        for minute, gpu_id, pid, deployment_id, used_max in processes:
            cursor.execute(
                "INSERT INTO inventory_process_rollup_1m (gpu_id, pid, bucket, deployment_id, "
                "samples, used_max) VALUES (%s, %s, %s, %s, 6, %s)",
                [gpu_id, pid, _minute(minute), deployment_id, used_max],
            )
        for minute, deployment_id, running, latency in engines:
            cursor.execute(
                "INSERT INTO inventory_engine_rollup_1m (deployment_id, bucket, samples, "
                "running_max, latency_p99_max) VALUES (%s, %s, 6, %s, %s)",
                [deployment_id, _minute(minute), running, latency],
            )
    rollups.pack_hours(HOUR0, _minute(MINUTES - 1))


def _minute_rows(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


@pytest.fixture
def three_hours():
    partitions.ensure_partitions(HOUR0, _minute(MINUTES))


@hypothesis_settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(processes=_process_minutes, engines=_engine_minutes, window=_window)
def test_the_packs_give_what_the_minute_rows_give(three_hours, processes, engines, window):
    start, end = window
    _write(processes, engines)

    # Co-peaks: per card and deployment, the highest of its processes each minute since start.
    expected: dict = {}
    for gpu_id, deployment_id, bucket, used_max in _minute_rows(
        "SELECT gpu_id, deployment_id, bucket, used_max FROM inventory_process_rollup_1m "
        "WHERE bucket > %s AND deployment_id IS NOT NULL AND used_max IS NOT NULL "
        "ORDER BY bucket",
        [start],
    ):
        series = expected.setdefault((gpu_id, deployment_id), {})
        series[bucket] = max(series.get(bucket, used_max), used_max)
    packed = {
        (gpu_id, deployment_id): (at_us, used_max)
        for gpu_id, deployment_id, at_us, used_max in queries.deployment_memory_minutes(
            list(CARDS), start
        )
    }
    assert packed.keys() == expected.keys()
    for key, series in expected.items():
        at_us, used_max = packed[key]
        assert at_us.tolist() == [queries._microseconds(bucket) for bucket in series]
        assert used_max.tolist() == list(series.values())

    # KV advice and interference: each deployment's minutes in (start, end], oldest first.
    minutes = _minute_rows(
        "SELECT deployment_id, extract(epoch FROM bucket)::float8, running_max, latency_p99_max "
        "FROM inventory_engine_rollup_1m WHERE bucket > %s AND bucket <= %s "
        "ORDER BY deployment_id, bucket",
        [start, end],
    )
    peaks = queries.running_peaks(list(DEPLOYMENTS), start, end)
    history = queries.load_and_latency(list(DEPLOYMENTS), start, end)
    for deployment_id in DEPLOYMENTS:
        rows = [row[1:] for row in minutes if row[0] == deployment_id]
        running = [r for _, r, _ in rows if r is not None]
        if running:
            assert peaks[deployment_id].tolist() == running
        else:
            assert deployment_id not in peaks
        if not rows:
            assert deployment_id not in history
            continue
        at, load, latency = (column.tolist() for column in history[deployment_id])
        assert at == [at for at, _, _ in rows]
        # NaN where the minute has no figure; otherwise the float the minute row reads as.
        assert [None if np.isnan(r) else r for r in load] == [r for _, r, _ in rows]
        assert [None if np.isnan(p) else p for p in latency] == [p for _, _, p in rows]


def test_a_refresh_packs_the_minutes_ingest_wrote_and_a_late_batch_repacks_them():
    gpu = GpuFactory(index=0)
    deployment = DeploymentFactory(host=gpu.host, gpus=[gpu])
    # Ten minutes ago, on a whole minute plus five seconds: ingest takes only recent batches.
    t0 = (dt.datetime.now(tz=dt.UTC) - dt.timedelta(minutes=10)).replace(second=5, microsecond=0)
    sampler = "7d3f2c1e-0000-4000-8000-0000000000a1"

    def minute_batch(seq, start, used, running):
        return batch(
            gpu.host, start=start, end=start + 10, seq=seq, sampler_id=sampler,
            cards=[card_row(gpu, used_max=used, used_last=used)],
            processes=[process_row(gpu, 100, used_max=used, used_last=used,
                                   deployment=deployment)],
            engines=[engine_row(deployment, running=running, p99_s=0.25)],
        )  # fmt: skip

    ingest_batch(minute_batch(2, t0.timestamp() + 10, 20 * GIB, 3.0))
    rollups.refresh_all()
    since = t0 - dt.timedelta(minutes=1)
    ((_, _, at_us, used),) = queries.deployment_memory_minutes([gpu.pk], since)
    minute = t0.replace(second=0)
    assert (at_us.tolist(), used.tolist()) == ([queries._microseconds(minute)], [20 * GIB])
    # The batch before it arrives late with the minute's real peaks: the pack follows.
    ingest_batch(minute_batch(1, t0.timestamp(), 70 * GIB, 9.5))
    rollups.refresh_all()
    ((_, _, _, used),) = queries.deployment_memory_minutes([gpu.pk], since)
    assert used.tolist() == [70 * GIB]
    now = dt.datetime.now(tz=dt.UTC)
    assert queries.running_peaks([deployment.pk], since, now)[deployment.pk].tolist() == [9.5]
    (_, _, latency) = queries.load_and_latency([deployment.pk], since, now)[deployment.pk]
    assert latency.tolist() == [0.25]


def test_the_packs_age_out_with_the_minute_rollups(three_hours):
    _write([(0, CARDS[0], 1000, DEPLOYMENTS[0], GIB)], [(0, DEPLOYMENTS[0], 1.0, 0.5)])
    day_after = HOUR0.replace(hour=0) + dt.timedelta(days=1)
    minute_rollups_expire = day_after + dt.timedelta(days=settings.TELEMETRY_1M_RETENTION_DAYS)
    day = f"p{HOUR0:%Y%m%d}"
    assert f"inventory_memory_minutes_1h_{day}" not in partitions.drop_expired(
        minute_rollups_expire - dt.timedelta(seconds=1)
    )
    dropped = partitions.drop_expired(minute_rollups_expire)
    assert {f"inventory_process_rollup_1m_{day}", f"inventory_engine_rollup_1m_{day}"} <= set(
        dropped
    )
    assert {f"inventory_memory_minutes_1h_{day}", f"inventory_engine_minutes_1h_{day}"} <= set(
        dropped
    )
