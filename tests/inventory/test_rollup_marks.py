"""Dirty marks name a minute and a host: a batch written while a refresh runs is rolled up by
the next refresh, and a late batch has only its own host's rollups recomputed."""

import datetime as dt
import threading

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from inventory.ingest.writer import ingest_batch
from inventory.timeseries import rollups
from tests.batches import GIB, batch, card_row, engine_row, process_row
from tests.factories import DeploymentFactory, GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

# An hour ago, on a whole hour plus five seconds: ingest accepts only recent batches.
T0 = (
    (dt.datetime.now(tz=dt.UTC) - dt.timedelta(hours=1))
    .replace(minute=0, second=5, microsecond=0)
    .timestamp()
)
SAMPLER = "7d3f2c1e-0000-4000-8000-{:012d}"
MINUTES = ("card_rollup_1m", "process_rollup_1m", "engine_rollup_1m")
HOURS = ("card_rollup_1h", "process_rollup_1h", "engine_rollup_1h")
PACKS = ("memory_minutes_1h", "engine_minutes_1h")


def _write(card, deployment, start: float, used: int, seq: int = 1) -> None:
    ingest_batch(
        batch(
            card.host,
            start=start,
            end=start + 10,
            seq=seq,
            sampler_id=SAMPLER.format(card.host_id),
            cards=[card_row(card, used_max=used, used_last=used)],
            processes=[
                process_row(card, 4242, deployment=deployment, used_max=used, used_last=used)
            ],
            engines=[engine_row(deployment, running=seq, p99_s=0.1 * seq)],
        )
    )


def _card_minute(card) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT samples, used_max FROM inventory_card_rollup_1m WHERE gpu_id = %s", [card.pk]
        )
        return cursor.fetchone()


def _rows(tables) -> dict[str, list[tuple]]:
    with connection.cursor() as cursor:
        rows = {}
        for table in tables:
            cursor.execute(f"SELECT ctid::text, * FROM inventory_{table} ORDER BY 2, 3, 4")
            rows[table] = [
                tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                for row in cursor.fetchall()
            ]
        return rows


def _without_ctids(rows: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    return {table: sorted(row[1:] for row in found) for table, found in rows.items()}


def _after_the_next_batch(step, card, deployment):
    """`step` of a refresh, run after the minute's next batch has committed from another
    connection (while the refresh runs)."""

    def meanwhile(*args):
        def the_next_batch():
            try:
                _write(card, deployment, T0 + 10, 30 * GIB, seq=2)
            finally:
                connections.close_all()

        writer = threading.Thread(target=the_next_batch)
        writer.start()
        writer.join()
        return step(*args)

    return meanwhile


@pytest.fixture
def two_hosts():
    """Two hosts, each with a card and a deployment on it."""
    cards = [GpuFactory(host=HostFactory(), index=0) for _ in range(2)]
    return [(card, DeploymentFactory(host=card.host, gpus=[card])) for card in cards]


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_batch_written_while_a_refresh_runs_is_rolled_up_by_the_next(monkeypatch):
    card = GpuFactory(index=0)
    deployment = DeploymentFactory(host=card.host, gpus=[card])
    _write(card, deployment, T0, 10 * GIB)
    # The next batch of the same minute commits after the refresh has read the minute's raw
    # samples and before it ends: its mark must outlive the refresh that did not see it.
    monkeypatch.setattr(
        rollups, "_refresh_hours", _after_the_next_batch(rollups._refresh_hours, card, deployment)
    )
    assert rollups.refresh() == 1
    monkeypatch.undo()
    assert _card_minute(card) == (1, 10 * GIB)  # the refresh did not see it
    assert rollups.refresh_all() == 1
    assert _card_minute(card) == (2, 30 * GIB)


def _process_minute(card) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT samples, used_max FROM inventory_process_rollup_1m WHERE gpu_id = %s",
            [card.pk],
        )
        return cursor.fetchone()


def test_a_batch_is_folded_into_its_minute_rows_not_recomputed_with_them(two_hosts):
    """The minute being filled takes the samples of the batches whose marks a refresh reads,
    folded into its card and process rows: the samples already rolled up are not read again
    (here they are gone, as if aged out, and still counted)."""
    (card, deployment), _ = two_hosts
    _write(card, deployment, T0, 10 * GIB)
    rollups.refresh_all()
    with connection.cursor() as cursor:
        for table in ("card_sample", "process_sample"):
            cursor.execute(f"DELETE FROM inventory_{table}")
    _write(card, deployment, T0 + 10, 4 * GIB, seq=2)
    rollups.refresh_all()
    assert _card_minute(card) == (2, 10 * GIB)
    assert _process_minute(card) == (2, 10 * GIB)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_refresh_sorts_in_the_memory_set_for_it_and_leaves_the_session_as_it_was(
    two_hosts, settings, monkeypatch
):
    (card, deployment), _ = two_hosts
    settings.ROLLUP_REFRESH_WORK_MEM_MB = 77
    _write(card, deployment, T0, 10 * GIB)
    seen = []

    def noting(refresh_hours):
        def step(cursor, *args):
            cursor.execute("SHOW work_mem")
            seen.append(cursor.fetchone()[0])
            return refresh_hours(cursor, *args)

        return step

    monkeypatch.setattr(rollups, "_refresh_hours", noting(rollups._refresh_hours))
    with connection.cursor() as cursor:
        cursor.execute("SHOW work_mem")
        before = cursor.fetchone()[0]
        assert rollups.refresh() == 1
        cursor.execute("SHOW work_mem")
        after = cursor.fetchone()[0]
    assert seen == ["77MB"]
    assert after == before != "77MB"


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_batch_written_after_a_refresh_read_its_marks_is_rolled_up_once(monkeypatch):
    """A minute recomputed from its samples (a mark without a batch: a tool's) leaves out the
    samples of a batch whose mark the refresh did not read: the next refresh folds them in,
    and they would count twice."""
    card = GpuFactory(index=0)
    deployment = DeploymentFactory(host=card.host, gpus=[card])
    _write(card, deployment, T0, 10 * GIB)
    rollups.refresh_all()
    minute = dt.datetime.fromtimestamp(T0, dt.UTC).replace(second=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO inventory_rollup_dirty (bucket, host_id) VALUES (%s, %s)",
            [minute, rollups.EVERY_HOST],
        )
    monkeypatch.setattr(
        rollups, "_targets", _after_the_next_batch(rollups._targets, card, deployment)
    )
    assert rollups.refresh() == 1
    monkeypatch.undo()
    assert _card_minute(card) == (1, 10 * GIB)
    assert _process_minute(card) == (1, 10 * GIB)
    assert rollups.refresh_all() == 1
    assert _card_minute(card) == (2, 30 * GIB)
    assert _process_minute(card) == (2, 30 * GIB)


def test_a_late_batch_recomputes_only_its_hosts_rollups(two_hosts):
    for seq in (1, 2, 3):
        for card, deployment in two_hosts:
            _write(card, deployment, T0 + 60 * (seq - 1), seq * GIB, seq)
        rollups.refresh_all()
    before = _rows(MINUTES + HOURS + PACKS)
    (late_card, late_deployment), (other_card, other_deployment) = two_hosts
    _write(late_card, late_deployment, T0 + 60 + 20, 9 * GIB, seq=4)  # minute 1, late
    with CaptureQueriesContext(connection) as captured:
        assert rollups.refresh_all() == 1
    statements = " ".join(query["sql"] for query in captured.captured_queries)
    assert "gpu_id = ANY(" in statements
    after = _rows(MINUTES + HOURS + PACKS)
    others = {
        "card_rollup_1m": other_card.pk,
        "process_rollup_1m": other_card.pk,
        "engine_rollup_1m": other_deployment.pk,
        "card_rollup_1h": other_card.pk,
        "process_rollup_1h": other_card.pk,
        "engine_rollup_1h": other_deployment.pk,
        "memory_minutes_1h": other_card.pk,
        "engine_minutes_1h": other_deployment.pk,
    }
    for table, key in others.items():
        # The other host's rows and packs are not written again (the same row versions).
        assert [row for row in after[table] if row[1] == key] == [
            row for row in before[table] if row[1] == key
        ], table
    assert [r for r in after["card_rollup_1m"] if r[1] == late_card.pk] != [
        r for r in before["card_rollup_1m"] if r[1] == late_card.pk
    ]
    # And what it left is what a refresh of every host's minutes gives.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO inventory_rollup_dirty (bucket) SELECT DISTINCT bucket "
            "FROM inventory_card_rollup_1m"
        )
    rollups.refresh_all()
    assert _without_ctids(_rows(MINUTES + HOURS + PACKS)) == _without_ctids(after)


def test_a_minute_marked_by_more_hosts_than_kept_apart_is_recomputed_for_every_host(
    two_hosts, monkeypatch
):
    monkeypatch.setattr(rollups, "HOSTS_APART", 1)
    for card, deployment in two_hosts:
        _write(card, deployment, T0, 5 * GIB)
    with CaptureQueriesContext(connection) as captured:
        assert rollups.refresh_all() == 1
    statements = " ".join(query["sql"] for query in captured.captured_queries)
    assert "gpu_id = ANY(" not in statements
    assert [_card_minute(card) for card, _ in two_hosts] == [(1, 5 * GIB)] * 2


def test_a_minute_marked_for_every_host_is_recomputed_for_every_host(two_hosts):
    for card, deployment in two_hosts:
        _write(card, deployment, T0, 5 * GIB)
    rollups.refresh_all()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE inventory_card_rollup_1m SET used_max = 1")
        cursor.execute(
            "INSERT INTO inventory_rollup_dirty (bucket, host_id) VALUES (%s, %s), (%s, %s)",
            [dt.datetime.fromtimestamp(T0, dt.UTC).replace(second=0), two_hosts[0][0].host_id,
             dt.datetime.fromtimestamp(T0, dt.UTC).replace(second=0), rollups.EVERY_HOST],
        )  # fmt: skip
    assert rollups.refresh_all() == 1
    assert [_card_minute(card) for card, _ in two_hosts] == [(1, 5 * GIB)] * 2


def _dirty_minutes() -> list[dt.datetime]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT bucket FROM inventory_rollup_dirty ORDER BY 1")
        return [row[0] for row in cursor.fetchall()]


def test_a_backlog_is_refreshed_newest_hour_first_and_comes_out_as_a_rebuild(two_hosts):
    # Three minutes in each of two hours: the hour before T0's and T0's.
    (card, deployment), _other = two_hosts
    starts = [T0 - 3600 + 60 * m for m in range(3)] + [T0 + 60 * m for m in range(3)]
    for seq, start in enumerate(starts, 1):
        _write(card, deployment, start, seq * GIB, seq)
    minutes = _dirty_minutes()
    older, newer = minutes[:3], minutes[3:]
    assert rollups.refresh(limit=2) == 2
    # The present first, its minutes in time order; the backlog waits.
    assert _dirty_minutes() == older + newer[2:]
    assert rollups.refresh(limit=2) == 2
    assert _dirty_minutes() == older[1:]
    assert rollups.refresh_all() == 2
    refreshed = _without_ctids(_rows(MINUTES + HOURS + PACKS))
    assert {row[1] for row in refreshed["card_rollup_1m"]} == set(minutes)
    # Each hour folded from its minutes in pieces, the later hour first: what a recompute of
    # both hours from their minute rows gives, to the last bit.
    rollups.rebuild_hours(minutes[0], minutes[-1])
    assert _without_ctids(_rows(MINUTES + HOURS + PACKS)) == refreshed
