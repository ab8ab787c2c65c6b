"""Gives each pytest-xdist worker a broker of its own, before Django reads its settings.

Loaded with `-p tests.xdist_worker` (pyproject's addopts), so it runs before pytest-django
sets Django up. pytest-django already gives each worker its own test database
(`test_<name>_gw<N>`); here each worker gets its own Redis database number (the configured
one plus 1 + N), its own folder broker, and its own ingest queue, so the processes one worker's
end-to-end tests start never take another worker's messages. Without xdist nothing changes.
"""

import os
from pathlib import Path

_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _own_redis_database(url: str, worker: int) -> str:
    base, _, database = url.partition("://")[2].rpartition("/")
    scheme = url.partition("://")[0]
    if not base:  # redis://host:port with no database number
        base, database = url.partition("://")[2], "0"
    number = int(database or 0) if (database or "0").isdigit() else 0
    # Redis has 16 databases (0-15) unless configured otherwise: the numbers wrap round.
    return f"{scheme}://{base}/{(number + 1 + worker) % 16}"


if _WORKER.startswith("gw"):
    _number = int(_WORKER.removeprefix("gw"))
    _url = os.environ.get("CELERY_BROKER_URL", "")
    if _url.startswith(("redis://", "rediss://")) and ";" not in _url:
        os.environ["CELERY_BROKER_URL"] = _own_redis_database(_url, _number)
    elif not _url:
        _checkout = Path(__file__).resolve().parent.parent
        os.environ["CELERY_FILESYSTEM_BROKER_DIR"] = str(_checkout / "var" / f"broker-{_WORKER}")
    os.environ["INGEST_QUEUE_NAME"] = f"ingest-{_WORKER}"
