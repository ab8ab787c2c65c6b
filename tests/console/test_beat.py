"""One beat per console: a second one against the same database exits, changing nothing."""

import pytest

from inventory.timeseries.locks import ProcessLock
from tests.processes import Processes, database_url_for_processes, wait_for


@pytest.mark.django_db
def test_a_process_lock_is_held_by_one_holder_until_released():
    first, second = ProcessLock("test lock"), ProcessLock("test lock")
    try:
        assert first.acquire()
        assert not second.acquire()
        assert ProcessLock("another lock").acquire()
        first.release()
        assert second.acquire()
    finally:
        first.release()
        second.release()


@pytest.mark.django_db
def test_a_process_lock_whose_connection_is_gone_releases_without_error():
    held = ProcessLock("test lock gone")
    assert held.acquire()
    held._connection.connection.close()  # the server side went away under the holder
    held.release()
    taker = ProcessLock("test lock gone")
    try:
        assert taker.acquire()
    finally:
        taker.release()


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_second_beat_against_the_same_database_refuses_to_run(tmp_path):
    # The folder broker of this test's own: the first beat's tasks reach no other test's worker.
    processes = Processes(
        {
            "DATABASE_URL": database_url_for_processes(),
            "CELERY_BROKER_URL": "",
            "CELERY_FILESYSTEM_BROKER_DIR": str(tmp_path / "broker"),
        },
        tmp_path,
    )
    beat = ["-m", "celery", "-A", "console", "beat", "-l", "info", "-s"]
    try:
        processes.start("first", [*beat, str(tmp_path / "first")])
        wait_for(
            lambda: "beat: Starting..." in processes.log("first"), 60, "the first beat",
            lambda: processes.log("first"),
        )  # fmt: skip
        processes.start("second", [*beat, str(tmp_path / "second")])
        second = processes.children["second"]
        assert second.wait(timeout=60) != 0
        assert "another celery beat already runs against this database" in processes.log("second")
        assert processes.children["first"].poll() is None
    finally:
        processes.stop()
