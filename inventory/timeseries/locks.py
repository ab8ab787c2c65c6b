"""Locks that belong to a process rather than to a transaction: PostgreSQL advisory locks.

The lock lives on a database connection of its own, outside Django's connection handling
(which closes idle connections), so it is held until `release()` or until the process ends:
a process killed with -9 loses its connection and with it the lock, and no lease has to run
out first. It also ends when that connection is cut (the database restarts); the holder is not
told, so a second process may take the lock then.
"""

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections


class ProcessLock:
    def __init__(self, name: str):
        self.name = name
        self._connection = None

    def acquire(self) -> bool:
        """Take the lock if no other process holds it; never waits."""
        connection = connections.create_connection(DEFAULT_DB_ALIAS)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [self.name])
            (taken,) = cursor.fetchone()
        if taken:
            self._connection = connection
        else:
            connection.close()
        return taken

    def release(self) -> None:
        if self._connection is None:
            return
        connection, self._connection = self._connection, None
        try:
            # Unlocked here, not by closing alone: the server lets go of a closed
            # connection's locks when its backend has exited, a moment after the close
            # returns, and a taker in that moment would be refused.
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [self.name])
        except DatabaseError:
            pass  # the connection is gone already, and the lock with it
        finally:
            connection.close()
