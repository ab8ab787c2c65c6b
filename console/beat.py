"""The console's one beat: a second `celery beat` against the same database refuses to run.

Two beats would send every periodic task twice. The launcher starts exactly one; this guards
against a second one started by hand or on another machine.
"""

from django_celery_beat.schedulers import DatabaseScheduler

from inventory.timeseries.locks import ProcessLock


class SingleBeatScheduler(DatabaseScheduler):
    """django-celery-beat's database scheduler, holding a lock for as long as its process runs.

    Taken before the scheduler reads or writes its schedule, so a refused beat changes nothing;
    not by the lazy one beat makes only to print its banner.
    """

    def __init__(self, *args, lazy: bool = False, **kwargs):
        self._lock = ProcessLock("celery beat")
        if not lazy and not self._lock.acquire():
            raise SystemExit(
                "another celery beat already runs against this database; "
                "a console runs exactly one (stop the other one first)"
            )
        super().__init__(*args, lazy=lazy, **kwargs)
