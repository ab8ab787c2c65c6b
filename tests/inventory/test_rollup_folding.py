"""The rollup refresh folds refreshed minutes into their hours instead of recomputing each hour
from all its minutes: whatever order the minutes come in, however often a minute is dirtied
again (the minute being filled, a late batch), repeated or in pieces, for one host or every
host, the hour rows and packs are the very rows a recompute of every hour from its minute rows
gives."""

import datetime as dt
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from inventory.timeseries import partitions, rollups
from tests.examples import examples
from tests.factories import DeploymentFactory, GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

HOUR0 = (dt.datetime.now(tz=dt.UTC) - dt.timedelta(days=2)).replace(
    minute=0, second=0, microsecond=0
)
# Minutes of two hours, across the hour between them.
OFFSETS = (0, 1, 2, 3, 57, 58, 59, 60, 61, 62, 119)
CARDS = (11, 12)
PIDS = (1000, 1001)
DEPLOYMENTS = (21, 22)
# Two hosts, A and B: each holds one of the cards and one of the deployments.
HOST_OF = {11: "A", 12: "B", 21: "A", 22: "B"}
GIB = 1024**3

HOURS = ("card_rollup_1h", "process_rollup_1h", "engine_rollup_1h")
PACKS = ("memory_minutes_1h", "engine_minutes_1h")
MINUTES = ("card_rollup_1m", "process_rollup_1m", "engine_rollup_1m")
KEYS = {
    "card_rollup_1h": "gpu_id, bucket",
    "process_rollup_1h": "gpu_id, pid, bucket",
    "engine_rollup_1h": "deployment_id, bucket",
    "memory_minutes_1h": "gpu_id, deployment_id, bucket",
    "engine_minutes_1h": "deployment_id, bucket",
    "card_rollup_1m": "gpu_id, bucket",
    "process_rollup_1m": "gpu_id, pid, bucket",
    "engine_rollup_1m": "deployment_id, bucket",
}

_bytes = st.one_of(st.none(), st.integers(0, 80).map(lambda n: n * GIB + 12345))
_real = st.one_of(st.none(), st.floats(0, 1e6, width=32), st.sampled_from((0.1, 1.7, 1e-3)))
_card = st.tuples(
    st.sampled_from(CARDS), st.integers(0, 59), st.booleans(), _bytes, _bytes,
    st.one_of(st.none(), st.integers(0, 100)), _real,
)  # fmt: skip
_process = st.tuples(
    st.sampled_from(CARDS), st.sampled_from(PIDS), st.integers(0, 59),
    st.sampled_from((*DEPLOYMENTS, None)), _bytes, st.sampled_from(("python3", "vllm", None)),
)  # fmt: skip
_engine = st.tuples(st.sampled_from(DEPLOYMENTS), st.integers(0, 59), _real, _real, _real)
# Whom a mark names: the hosts whose rows a batch wrote and each host's batch (as ingest marks),
# the hosts alone (marks of before batches were named), or every host.
_marked = st.sampled_from(("batches", "hosts", "every"))
# What happens between refreshes: a batch lands in a minute (its samples added, the minute
# dirty; a refresh may follow at once), a minute is dirtied again with nothing new, a
# minute's raw samples go (aged out) and it is dirtied, or a refresh runs taking up to so
# many dirty minutes.
_batch = st.tuples(
    st.just("batch"),
    # Mostly the minute after the last batch's, or that minute again (the minute being
    # filled), as flushes come; sometimes any minute (late, early, out of order).
    st.one_of(st.just("next"), st.just("same"), st.sampled_from(OFFSETS)),
    st.lists(_card, max_size=3),
    st.lists(_process, max_size=4),
    st.lists(_engine, max_size=2),
    st.booleans(),  # a refresh right after it
    _marked,
)
# Weighted by hand: one_of draws its branches evenly (and the same branch twice counts once).
_step = st.integers(0, 9).flatmap(
    lambda n: (
        _batch
        if n < 6
        else st.tuples(st.just("refresh"), st.integers(1, 4))
        if n < 8
        else st.tuples(
            st.sampled_from(("again", "forget")),
            st.sampled_from(OFFSETS),
            st.sampled_from(("every", "A", "B")),
        )
    )
)


def _minute(offset: int) -> dt.datetime:
    return HOUR0 + dt.timedelta(minutes=offset)


def _execute(sql: str, params=None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def _dirty(minute: dt.datetime, *hosts: str) -> None:
    """Mark `minute` for those of the two hosts named, or for every host."""
    ids = [HOSTS[host] for host in hosts if host != "every"] if hosts else []
    if not ids or "every" in hosts:
        ids = [rollups.EVERY_HOST]
    _execute(
        "INSERT INTO inventory_rollup_dirty (bucket, host_id) SELECT %s, unnest(%s::bigint[])",
        [minute, ids],
    )


HOSTS: dict[str, int] = {}


def _land(minute: dt.datetime, cards, processes, engines, marked: str = "every") -> None:
    """A batch of each host whose rows these are lands in `minute`, marked as `marked` says."""
    batch_of = {host: uuid.uuid4() for host in ("A", "B")}
    for gpu_id, second, lost, used, free, util, frag in cards:
        _execute(
            "INSERT INTO inventory_card_sample (gpu_id, ts, batch_id, interval_s, samples, lost,"
            " total_bytes, used_max, used_last, reserved_last, free_min, util_gpu_max,"
            " util_gpu_last, frag_index_max) VALUES (%s, %s, %s, 10, 10, %s,"
            " %s, %s, %s, %s, %s, %s, %s, %s)",
            [gpu_id, minute + dt.timedelta(seconds=second), batch_of[HOST_OF[gpu_id]], lost,
             80 * GIB, used, used, used, free, util, util, frag],
        )  # fmt: skip
    for gpu_id, pid, second, deployment_id, used, name in processes:
        _execute(
            "INSERT INTO inventory_process_sample (gpu_id, ts, batch_id, pid, kind, name,"
            " deployment_id, used_max, used_last, samples, frag_index_max) VALUES (%s, %s,"
            " %s, %s, 'compute', %s, %s, %s, %s, 10, 0.25)",
            [gpu_id, minute + dt.timedelta(seconds=second), batch_of[HOST_OF[gpu_id]], pid,
             name, deployment_id, used, used],
        )  # fmt: skip
    for deployment_id, second, running, latency, requests in engines:
        _execute(
            "INSERT INTO inventory_engine_sample (deployment_id, ts, batch_id, kv_usage_max,"
            " running_max, running_last, waiting_max, requests, requests_window_s,"
            " latency_p50_s, latency_p95_s, latency_p99_s) VALUES (%s, %s, %s,"
            " %s, %s, %s, %s, %s, 10, %s, %s, %s)",
            [deployment_id, minute + dt.timedelta(seconds=second),
             batch_of[HOST_OF[deployment_id]], latency, running, running, requests, requests,
             latency, latency, latency],
        )  # fmt: skip
    owners = {HOST_OF[row[0]] for row in (*cards, *processes, *engines)} or {"A"}
    if marked == "every":
        _dirty(minute)
    elif marked == "hosts":
        _dirty(minute, *owners)
    else:
        _execute(
            "INSERT INTO inventory_rollup_dirty (bucket, host_id, batch_id)"
            " SELECT %s, unnest(%s::bigint[]), unnest(%s::uuid[])",
            [minute, [HOSTS[o] for o in sorted(owners)], [batch_of[o] for o in sorted(owners)]],
        )


def _forget(minute: dt.datetime, marked: str = "every") -> None:
    for table in ("card_sample", "process_sample", "engine_sample"):
        _execute(
            f"DELETE FROM inventory_{table} WHERE ts >= %s AND ts < %s",
            [minute, minute + dt.timedelta(minutes=1)],
        )
    _dirty(minute, marked)


def _rows(tables) -> dict[str, list[tuple]]:
    return {
        table: [
            tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
            for row in _execute(f"SELECT * FROM inventory_{table} ORDER BY {KEYS[table]}")
        ]
        for table in tables
    }


@pytest.fixture
def two_hours():
    partitions.ensure_partitions(HOUR0 - dt.timedelta(hours=1), HOUR0 + dt.timedelta(hours=3))
    for name in ("A", "B"):
        host = HostFactory()
        HOSTS[name] = host.pk
        for pk, owner in HOST_OF.items():
            if owner == name and pk in CARDS:
                GpuFactory(pk=pk, host=host, index=CARDS.index(pk))
            elif owner == name:
                DeploymentFactory(pk=pk, host=host)


@hypothesis_settings(
    max_examples=examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_step, min_size=3, max_size=24))
def test_folded_hours_are_the_hours_recomputed_from_their_minutes(two_hours, steps):
    tables = [table.name for table in partitions.TABLES]
    _execute(f"TRUNCATE {', '.join(tables)}, inventory_rollup_dirty, inventory_rollup_hour_folded")
    last = 0
    forgotten, topped_up = set(), set()
    for step in steps:
        if step[0] == "batch":
            if step[1] == "next":
                last = OFFSETS[min(OFFSETS.index(last) + 1, len(OFFSETS) - 1)]
            elif step[1] != "same":
                last = step[1]
            _land(_minute(last), *step[2:5], marked=step[6])
            if step[6] == "batches" and last in forgotten:
                topped_up.add(last)
            if step[5]:
                rollups.refresh()
        elif step[0] == "again":
            _dirty(_minute(step[1]), step[2])
        elif step[0] == "forget":
            forgotten.add(step[1])
            _forget(_minute(step[1]), step[2])
        else:
            rollups.refresh(step[1])
    rollups.refresh_all()
    folded = _rows(HOURS + PACKS)
    minutes = _rows(MINUTES)

    rollups.rebuild_hours(HOUR0, _minute(OFFSETS[-1]))
    assert _rows(HOURS + PACKS) == folded

    # And a refresh of every minute again changes nothing (idempotent, minutes included): a
    # minute's batches folded in are the minute recomputed from its samples. Not where its
    # samples were aged out before a batch was folded in: that minute's rows hold the batch
    # and what its aged-out samples gave, a recompute the batch alone.
    for offset in set(OFFSETS) - topped_up:
        _dirty(_minute(offset))
    rollups.refresh_all()
    assert _rows(MINUTES) == minutes
    assert _rows(HOURS + PACKS) == folded


def test_the_minute_being_filled_is_folded_not_recomputed(two_hours):
    """The steady state: the minute being filled is dirtied again by every flush; its hour is
    folded (no hour recompute of cards, processes or engines)."""
    for offset in (0, 1):
        _land(_minute(offset), [(11, 5, False, GIB, GIB, 50, 0.5)], [(11, 1000, 5, 21, GIB,
              "vllm")], [(21, 5, 3.0, 0.2, 10.0)])  # fmt: skip
        rollups.refresh_all()
    _land(_minute(1), [(11, 15, False, 2 * GIB, GIB, 50, 0.5)], [], [(21, 15, 4.1, 0.3, 7.3)])
    with CaptureQueriesContext(connection) as captured:
        rollups.refresh_all()
    statements = " ".join(query["sql"] for query in captured.captured_queries)
    assert "INSERT INTO inventory_card_rollup_1h AS h" in statements  # folded
    assert "INSERT INTO inventory_card_rollup_1h (" not in statements  # not recomputed
    assert "INSERT INTO inventory_process_rollup_1h (" not in statements
    assert "INSERT INTO inventory_memory_minutes_1h (" not in statements
    # The engine hours too, their float sums folded onto the sums before the minute filled.
    assert "INSERT INTO inventory_engine_rollup_1h AS h" in statements
    # The minute's rows are rewritten in place, on their own pages: no row deleted, and each
    # update a HOT one (its partition keeps room), so no index entry is written.
    for kind in ("card", "engine"):
        partition = f"inventory_{kind}_rollup_1m_p{_minute(1):%Y%m%d}"
        assert _execute(
            "SELECT pg_stat_get_xact_tuples_deleted(%s::regclass),"
            " pg_stat_get_xact_tuples_hot_updated(%s::regclass)",
            [partition, partition],
        ) == [(0, 1)], kind
    assert "INSERT INTO inventory_engine_rollup_1h (" not in statements
    folded = _rows(HOURS + PACKS)
    rollups.rebuild_hours(HOUR0, _minute(1))
    assert _rows(HOURS + PACKS) == folded
    assert folded["card_rollup_1h"][0][5] == 2 * GIB  # the hour's peak: the minute's new one


def test_a_minute_whose_samples_went_and_came_back_fewer_has_its_hour_recomputed(two_hours):
    """A minute's new row must hold its old one to be folded (its peak can only rise): where
    the raw samples went (aged out) and fewer came back, the hour is recomputed whole."""
    card = [(11, 5, False, 4 * GIB, GIB, 50, 0.5)]
    _land(_minute(0), card, [], [])
    _land(_minute(1), [(11, 5, False, 9 * GIB, GIB, 50, 0.5)], [], [])
    rollups.refresh_all()
    _forget(_minute(1))
    rollups.refresh_all()  # nothing to recompute it from: the minute keeps its rows
    assert _rows(["card_rollup_1h"])["card_rollup_1h"][0][5] == 9 * GIB
    _land(_minute(1), [(11, 5, False, 2 * GIB, GIB, 50, 0.5)], [], [])
    rollups.refresh_all()
    assert _rows(["card_rollup_1h"])["card_rollup_1h"][0][5] == 4 * GIB
    folded = _rows(HOURS + PACKS)
    rollups.rebuild_hours(HOUR0, _minute(1))
    assert _rows(HOURS + PACKS) == folded


def test_a_pack_whose_last_minute_loses_its_entry_has_it_stripped(two_hours):
    """The minute being filled is a pack's last entry; when that minute's process comes to
    count under another deployment, the old deployment's pack loses the entry and the new
    one's gains it, as a recompute gives."""
    for offset in (0, 1):
        _land(_minute(offset), [], [(11, 1000, 5, 21, GIB, "vllm")], [])
        rollups.refresh_all()
    _land(_minute(1), [], [(11, 1000, 15, 22, 2 * GIB, "vllm")], [])
    rollups.refresh_all()
    packs = _rows(["memory_minutes_1h"])["memory_minutes_1h"]
    assert [(gpu, deployment, minutes) for gpu, deployment, _hour, minutes, *_ in packs] == [
        (11, 21, 1), (11, 22, 1)
    ]  # fmt: skip
    folded = _rows(HOURS + PACKS)
    rollups.rebuild_hours(HOUR0, _minute(1))
    assert _rows(HOURS + PACKS) == folded


def test_a_full_page_of_minute_rows_is_rewritten_in_place(two_hours):
    """The minute partitions keep room on every page: a page filled by a minute's rows takes
    their next versions too (HOT updates), not only the rows that happen to have room."""
    processes = [(11, pid, 5, 21, GIB, "vllm") for pid in range(300)]
    _land(_minute(1), [], processes, [])
    rollups.refresh_all()
    _land(_minute(1), [], [(11, pid, 15, 21, 2 * GIB, "vllm") for pid in range(300)], [])
    rollups.refresh_all()
    partition = f"inventory_process_rollup_1m_p{_minute(1):%Y%m%d}"
    assert _execute(
        "SELECT pg_stat_get_xact_tuples_updated(%s::regclass),"
        " pg_stat_get_xact_tuples_hot_updated(%s::regclass)",
        [partition, partition],
    ) == [(300, 300)]
    assert _execute("SELECT reloptions FROM pg_class WHERE relname = %s", [partition]) == [
        ([f"fillfactor={partitions.MINUTE_FILLFACTOR}"],)
    ]


def test_a_row_its_samples_no_longer_give_goes_where_its_host_has_samples_again(two_hours):
    """A minute's rows are rewritten in place: a row the recompute does not give again is
    deleted where its host has new samples in that minute, and kept where its host has none
    (its samples aged out)."""
    _land(_minute(0), [(11, 5, False, GIB, GIB, 50, 0.5), (12, 5, False, GIB, GIB, 50, 0.5)],
          [(11, 1000, 5, 21, GIB, "vllm"), (11, 1001, 5, 21, GIB, "vllm"),
           (12, 1000, 5, 22, GIB, "vllm")],
          [(21, 5, 3.0, 0.2, 10.0), (22, 5, 3.0, 0.2, 10.0)])  # fmt: skip
    rollups.refresh_all()
    _forget(_minute(0))
    rollups.refresh_all()  # nothing to recompute the minute from: every row stays
    assert [r[:2] for r in _rows(["process_rollup_1m"])["process_rollup_1m"]] == [
        (11, 1000), (11, 1001), (12, 1000)
    ]  # fmt: skip
    # Host A's card comes back with one of its two processes, and without its engine.
    _land(_minute(0), [(11, 15, False, 2 * GIB, GIB, 50, 0.5)], [(11, 1000, 15, 21, GIB, "vllm")],
          [])  # fmt: skip
    rollups.refresh_all()
    minutes = _rows(MINUTES)
    assert [r[:2] for r in minutes["process_rollup_1m"]] == [(11, 1000), (12, 1000)]
    assert [r[0] for r in minutes["engine_rollup_1m"]] == [22]
    assert [(r[0], r[5]) for r in minutes["card_rollup_1m"]] == [(11, 2 * GIB), (12, GIB)]
    folded = _rows(HOURS + PACKS)
    rollups.rebuild_hours(HOUR0, _minute(1))
    assert _rows(HOURS + PACKS) == folded


def _ctids(table: str) -> dict[int, str]:
    return dict(_execute(f"SELECT gpu_id, ctid::text FROM inventory_{table}"))


def test_a_late_batch_is_folded_and_makes_again_only_the_packs_it_changed(two_hours):
    """An agent's backlog: one card's batch for a minute before its hour's last, after that
    minute was refreshed. The hour is folded, not recomputed; of the packs, only the ones
    whose entry for that minute changed are made again."""
    for offset in (0, 1, 2):
        _land(_minute(offset), [(11, 5, False, GIB, GIB, 50, 0.5), (12, 5, False, GIB, GIB,
              50, 0.5)], [(11, 1000, 5, 21, GIB, "vllm"), (12, 1000, 5, 22, GIB, "vllm")],
              [(21, 5, 3.0, 0.2, 10.0), (22, 5, 3.0, 0.2, 10.0)])  # fmt: skip
        rollups.refresh_all()
    before = _ctids("memory_minutes_1h")
    _land(_minute(1), [(11, 35, False, 3 * GIB, GIB, 50, 0.5)],
          [(11, 1000, 35, 21, 3 * GIB, "vllm")], [(21, 35, 9.0, 0.3, 10.0)])  # fmt: skip
    with CaptureQueriesContext(connection) as captured:
        rollups.refresh_all()
    statements = " ".join(query["sql"] for query in captured.captured_queries)
    assert "INSERT INTO inventory_card_rollup_1h AS h" in statements  # folded
    assert "INSERT INTO inventory_card_rollup_1h (" not in statements  # not recomputed
    assert "INSERT INTO inventory_process_rollup_1h (" not in statements
    assert "inventory_process_rollups_1m(" not in statements  # no pack made from the hour
    after = _ctids("memory_minutes_1h")
    assert after[12] == before[12]  # the other card's pack untouched
    assert after[11] != before[11]
    folded = _rows(HOURS + PACKS)
    rollups.rebuild_hours(HOUR0, _minute(2))
    assert _rows(HOURS + PACKS) == folded
    assert folded["card_rollup_1h"][0][5] == 3 * GIB  # the late minute's peak is the hour's
