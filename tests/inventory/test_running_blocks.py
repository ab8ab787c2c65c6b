"""A window's P95 of running requests read from blocks of counted peaks: the very figure that
ranking every minute gives, whatever is built, late or rebuilt."""

import datetime as dt
import uuid

import pytest
from django.db import connection
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from inventory.analytics.stats import percentile
from inventory.ingest import samples
from inventory.timeseries import partitions, queries, rollups, running_blocks
from tests.examples import examples
from tests.factories import DeploymentFactory, GpuFactory, HostFactory, ServedModelFactory
from tests.tokens import token_for

pytestmark = pytest.mark.django_db

BUILD_HOUR = running_blocks.BUILD_HOUR

HOURS = 6
# Six whole hours from about two days ago (settled, within every retention), the first on a
# multiple of eight hours from the epoch, so that the blocks in them are the same at any hour.
_EIGHT_HOURS = dt.timedelta(hours=8)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
HOUR0 = _EPOCH + (dt.datetime.now(tz=dt.UTC) - dt.timedelta(days=2) - _EPOCH) // _EIGHT_HOURS * (
    _EIGHT_HOURS
)
SPAN_S = HOURS * 3600

# Whole numbers of running requests as engines report them, with ties, and odd fractions.
_peak = st.one_of(
    st.none(), st.integers(0, 12).map(float), st.floats(0, 1e4, width=32, allow_subnormal=False)
)
_sample = st.tuples(st.integers(0, SPAN_S * 1_000_000 - 1), st.integers(0, 1), _peak)
_samples = st.lists(_sample, max_size=40, unique_by=lambda s: s[0])
# Windows in seconds from HOUR0: within the span, across hour ends, over all of it.
_window = st.tuples(st.integers(-3600, SPAN_S), st.integers(1, SPAN_S + 3600)).map(
    lambda w: (w[0], w[0] + w[1])
)


@given(first=st.integers(0, 5000), length=st.integers(0, 800))
def test_the_cover_tiles_the_hours_with_aligned_blocks(first, length):
    blocks = running_blocks.cover(first, first + length)
    hours = [h for level, start in blocks for h in range(start, start + (1 << level))]
    assert hours == list(range(first, first + length))
    assert all(start % (1 << level) == 0 for level, start in blocks)
    assert len(blocks) <= 2 * running_blocks.TOP_LEVEL + length // 128 + 1


@pytest.fixture
def engines():
    host = HostFactory(collector="agent")
    gpu = GpuFactory(host=host, index=0)
    deployments = [DeploymentFactory(host=host, gpus=[gpu]) for _ in range(2)]
    partitions.ensure_partitions(HOUR0, HOUR0 + dt.timedelta(seconds=SPAN_S))
    return deployments


def _write(deployments, written) -> None:
    engines, times = [], set()
    for offset_us, d, running in written:
        ts = HOUR0 + dt.timedelta(microseconds=offset_us)
        batch_id = uuid.uuid4()
        times.add((ts, deployments[d].host_id, batch_id))
        engines.append((deployments[d].pk, ts, batch_id, 0.5, 0.5, running, running, 1.0,
                        1.0, 2**30, running, 10.0, 0.2, 0.2, 0.2, 2**20, 2**30, 0.9))  # fmt: skip
    if times:
        samples.write(None, engines, None, times)
    rollups.refresh_all()


def _build(monkeypatch, hours: int) -> int:
    """A build pass `hours` after HOUR0 that keeps what lies after HOUR0 (not a week of empty
    hours before it)."""
    now = HOUR0 + dt.timedelta(hours=hours) + running_blocks.SETTLE
    monkeypatch.setattr(running_blocks, "KEEP", now - HOUR0 + dt.timedelta(seconds=1))
    return running_blocks.build(now=now)


def _ranked_minutes(deployments, start, end, pct) -> dict:
    """The figure by its definition: every minute's peak, ranked."""
    minutes = queries.engine_minutes([d.pk for d in deployments], start, end)
    answer = {}
    for deployment_id, rows in minutes.items():
        peaks = [row.running_max for row in rows if row.running_max is not None]
        if peaks:
            answer[deployment_id] = percentile(peaks, pct)
    return answer


def _complete_blocks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM inventory_running_block WHERE complete")
        return cursor.fetchone()[0]


def _clear():
    with connection.cursor() as cursor:
        for table in ("inventory_engine_sample", "inventory_engine_sample_pack",
                      "inventory_engine_rollup_1m", "inventory_engine_rollup_1m_pack",
                      "inventory_engine_rollup_1h", "inventory_engine_minutes_1h",
                      "inventory_running_histogram", "inventory_running_block",
                      "inventory_rollup_hour_folded"):  # fmt: skip
            cursor.execute(f"DELETE FROM {table}")


@hypothesis_settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    first=_samples,
    late=_samples,
    windows=st.lists(_window, min_size=1, max_size=3),
    pct=st.sampled_from([0, 50, 95, 99, 100]),
)
def test_the_percentile_from_blocks_is_the_percentile_of_every_minute(
    engines, monkeypatch, first, late, windows, pct
):
    _clear()
    _write(engines, first)
    built = _build(monkeypatch, HOURS)
    # Every hour, every pair, every four hours: the span's six hours hold 6 + 3 + 1 blocks.
    assert built == 10 and _complete_blocks() == 10
    ids = [d.pk for d in engines]

    def same_as_every_minute():
        for start_s, end_s in windows:
            start = HOUR0 + dt.timedelta(seconds=start_s)
            end = HOUR0 + dt.timedelta(seconds=end_s)
            assert queries.running_percentile(ids, start, end, pct) == _ranked_minutes(
                engines, start, end, pct
            ), (start_s, end_s)

    same_as_every_minute()
    # A late batch: the refresh rewrites its minutes and the blocks holding them stop counting.
    late = [sample for sample in late if sample[0] not in {s[0] for s in first}]
    _write(engines, late)
    late_hours = {offset_us // 3_600_000_000 for offset_us, _, _ in late}
    if late:
        assert _complete_blocks() < 10
    same_as_every_minute()
    # Built again, from the minutes as they are now.
    missing = 10 - _complete_blocks()
    assert _build(monkeypatch, HOURS) == missing
    assert _complete_blocks() == 10
    same_as_every_minute()
    # The blocks are what the whole span was read from.
    span = HOUR0 - dt.timedelta(microseconds=1), HOUR0 + dt.timedelta(seconds=SPAN_S)
    used = running_blocks.running_percentile(ids, *span, pct)
    assert used == _ranked_minutes(engines, *span, pct)
    assert late_hours <= set(range(HOURS))


def test_a_build_that_a_refresh_overtakes_is_dropped(engines, monkeypatch):
    _write(engines, [(60_000_000, 0, 3.0)])
    # The refresh of a late minute of that hour commits between the build's start and its end.
    monkeypatch.setattr(
        running_blocks,
        "BUILD_HOUR",
        "WITH overtaken AS (DELETE FROM inventory_running_block WHERE start = %(start)s) "
        + running_blocks.BUILD_HOUR,
    )
    assert _build(monkeypatch, 1) == 0
    assert _complete_blocks() == 0
    monkeypatch.setattr(running_blocks, "BUILD_HOUR", BUILD_HOUR)
    assert _build(monkeypatch, 1) == 1


def test_blocks_of_hours_rewritten_other_than_by_a_refresh_stop_counting(engines, monkeypatch):
    _write(engines, [(60_000_000, 0, 3.0), (3_700_000_000, 0, 5.0)])
    _build(monkeypatch, 2)
    assert _complete_blocks() == 3
    rollups.rebuild_hours(HOUR0, HOUR0)
    assert _complete_blocks() == 1  # the second hour's
    rollups.pack_hours(HOUR0 + dt.timedelta(hours=1), HOUR0 + dt.timedelta(hours=1))
    assert _complete_blocks() == 0


def test_blocks_past_the_minutes_retention_are_not_read(engines, monkeypatch, settings):
    _write(engines, [(60_000_000, 0, 3.0), (3_700_000_000, 0, 5.0)])
    _build(monkeypatch, 2)
    window = HOUR0 - dt.timedelta(minutes=1), HOUR0 + dt.timedelta(hours=2)
    assert running_blocks.running_percentile([engines[0].pk], *window, 50) == {engines[0].pk: 4.0}
    # Retention drops whole days older than it: no block of such a day may be counted.
    settings.TELEMETRY_1M_RETENTION_DAYS = 1
    assert running_blocks.running_percentile([engines[0].pk], *window, 50) is None


def test_build_forgets_blocks_older_than_it_keeps(engines, monkeypatch):
    _write(engines, [(60_000_000, 0, 3.0)])
    _build(monkeypatch, 1)
    assert _complete_blocks() == 1
    # Two hours on, keeping as long: the first hour is forgotten, the (empty) third built.
    later = HOUR0 + dt.timedelta(hours=3) + running_blocks.SETTLE
    assert running_blocks.build(now=later) == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM inventory_running_histogram")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT start FROM inventory_running_block")
        assert cursor.fetchall() == [(HOUR0 + dt.timedelta(hours=2),)]


def _write_week_of_minutes(deployment, end: dt.datetime) -> None:
    """A week and a day of minutes written straight, as the benchmark's history is, and their
    hours packed as a refresh would have left them."""
    first = end - dt.timedelta(days=8)
    partitions.ensure_partitions(first, end)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO inventory_engine_rollup_1m (deployment_id, bucket, samples, running_max,"
            " running_sum, running_count, requests) "
            "SELECT %s, b, 6, (extract(epoch FROM b)::bigint / 60 * 7919 %% 97)::real / 4, "
            "1, 1, 0 FROM generate_series(date_trunc('minute', %s::timestamptz), %s, "
            "interval '1 minute') b",
            [deployment.pk, first, end],
        )
    rollups.rebuild_hours(first, end)


def test_metrics_reads_the_weeks_p95_from_blocks_and_shows_the_same_gap(client, personas):
    deployment = DeploymentFactory(
        served_model=ServedModelFactory(name="chat"),
        kv_reservation_bytes=2**30,
        kv_tokens_per_request=4096,
    )
    now = timezone.now()
    _write_week_of_minutes(deployment, now)
    week = now - dt.timedelta(days=7), now
    ranked = queries.running_percentile([deployment.pk], *week, 95)
    assert running_blocks.running_percentile([deployment.pk], *week, 95) is None

    def kv_gap() -> list:
        token = token_for(personas["manager"])
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Token {token}")
        return [
            (sample.labels, sample.value)
            for family in text_string_to_metric_families(response.content.decode())
            for sample in family.samples
            if sample.name == "gpu_console_kv_reservation_gap_bytes"
        ]

    before = kv_gap()
    assert running_blocks.build(now=now) > 0
    # A week: one block of 128 hours and a few smaller tile its whole hours.
    assert running_blocks.running_percentile([deployment.pk], *week, 95) == ranked
    assert queries.running_percentile([deployment.pk], *week, 95) == ranked
    assert kv_gap() == before
    assert [labels["deployment"] for labels, _ in before] == [str(deployment.pk)]
