"""A bounded FIFO of batches waiting to be published.

When the broker is away the host keeps the newest `max_batches` and drops the oldest: recent
history is what on-call needs, and memory must not grow with an outage. Drops are counted so
the gap is reported, not hidden.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

Batch = dict[str, Any]


class Outbox:
    def __init__(self, max_batches: int) -> None:
        if max_batches < 1:
            raise ValueError("an outbox holds at least one batch")
        self.max_batches = max_batches
        self._queue: deque[Batch] = deque()
        self.dropped = 0
        self.last_error: str | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, batch: Batch) -> None:
        if len(self._queue) >= self.max_batches:
            self._queue.popleft()
            self.dropped += 1
        self._queue.append(batch)

    def pending(self) -> list[Batch]:
        return list(self._queue)

    def drain(self, publish: Callable[[Batch], None]) -> int:
        """Publish oldest first; stop at the first failure and keep that batch at the head."""
        published = 0
        while self._queue:
            try:
                publish(self._queue[0])
            except Exception as exc:  # any broker failure: keep the batch and retry next time
                self.last_error = f"{type(exc).__name__}: {exc}"
                break
            self._queue.popleft()
            published += 1
        else:
            self.last_error = None
        return published
