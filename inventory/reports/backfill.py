"""How far a backfill of history is, per host, in the shared cache: the fleet board shows it
while the demo fleet's past weeks are being written (inventory.demo_history)."""

from django.core.cache import cache


class BackfillProgress:
    """The progress of one backfill, saved to the cache at every step."""

    CACHE_KEY = "demo-history-progress"
    KEPT_S = 24 * 3600

    def __init__(self, days: float, hosts: list[str]):
        self.state = {"days": days, "hosts": dict.fromkeys(hosts, 0.0), "finished": not hosts}
        self._save()

    def of(self, host: str, start: float, end: float):
        def report(now: float) -> None:
            self.state["hosts"][host] = round(min(1.0, (now - start) / (end - start)), 3)
            self._save()

        return report

    def done(self, host: str) -> None:
        self.state["hosts"][host] = 1.0
        self._save()

    def finish(self) -> None:
        self.state["finished"] = True
        self._save()

    def _save(self) -> None:
        cache.set(self.CACHE_KEY, self.state, self.KEPT_S)

    @classmethod
    def current(cls) -> dict | None:
        return cache.get(cls.CACHE_KEY)
