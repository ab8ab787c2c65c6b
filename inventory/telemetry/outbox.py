"""A bounded FIFO of batches waiting to be published, kept in SQLite.

When the broker is away the host keeps the newest `max_batches` and drops the oldest: recent
history is what on-call needs, and the queue must not grow with an outage. Drops are counted
(and the count kept with the queue) so the gap is reported, not hidden.

With a `path` the queue lives in a file in the agent's state folder: each put and each removal
is its own committed transaction, so an agent killed or restarted during an outage finds its
waiting batches again. A batch is removed only after it was published; a kill between the two
publishes it twice, which ingest ignores (batch ids are unique). Without a path the same queue
lives in memory, for tests and one-off runs.

One thread may put while another drains: every statement runs under one lock, and publishing
itself runs outside it, so a slow broker never holds up sampling.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

Batch = dict[str, Any]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batch (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counter (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counter (name, value) VALUES ('dropped', 0);
"""


class Outbox:
    def __init__(self, max_batches: int, path: Path | str | None = None) -> None:
        if max_batches < 1:
            raise ValueError("an outbox holds at least one batch")
        self.max_batches = max_batches
        self.path = Path(path) if path is not None else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(
            str(self.path) if self.path else ":memory:",
            isolation_level=None,  # autocommit; transactions are opened explicitly
            check_same_thread=False,
        )
        if self.path is not None:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # a put survives a power cut
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self.last_error: str | None = None

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM batch").fetchone()[0]

    @property
    def dropped(self) -> int:
        with self._lock:
            return self._counter()

    def _counter(self) -> int:
        return self._db.execute("SELECT value FROM counter WHERE name = 'dropped'").fetchone()[0]

    def put(self, batch: Batch) -> None:
        body = json.dumps(batch, separators=(",", ":"))
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT INTO batch (body) VALUES (?)", (body,))
                excess = self._db.execute("SELECT count(*) FROM batch").fetchone()[0]
                excess -= self.max_batches
                if excess > 0:
                    self._db.execute(
                        "DELETE FROM batch WHERE id IN (SELECT id FROM batch ORDER BY id LIMIT ?)",
                        (excess,),
                    )
                    self._db.execute(
                        "UPDATE counter SET value = value + ? WHERE name = 'dropped'", (excess,)
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def pending(self) -> list[Batch]:
        with self._lock:
            rows = self._db.execute("SELECT body FROM batch ORDER BY id").fetchall()
        return [json.loads(body) for (body,) in rows]

    def drain(self, publish: Callable[[Batch], None]) -> int:
        """Publish oldest first; stop at the first failure and keep that batch at the head."""
        published = 0
        while True:
            with self._lock:
                head = self._db.execute("SELECT id, body FROM batch ORDER BY id LIMIT 1").fetchone()
            if head is None:
                self.last_error = None
                return published
            row_id, body = head
            try:
                publish(json.loads(body))
            except Exception as exc:  # any broker failure: keep the batch and retry next time
                self.last_error = f"{type(exc).__name__}: {exc}"
                return published
            with self._lock:
                removed = self._db.execute("DELETE FROM batch WHERE id = ?", (row_id,)).rowcount
                if not removed:  # dropped at the bound while it went out: it was not lost
                    self._db.execute(
                        "UPDATE counter SET value = max(0, value - 1) WHERE name = 'dropped'"
                    )
            published += 1
