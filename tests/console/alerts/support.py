"""Telemetry for alert tests, written through the real ingest path."""

import time

from inventory.ingest.writer import ingest_batch
from tests.batches import GIB, batch, card_row


def report_cards(host, gpus, used_fraction: float, *, at: float | None = None, events=()):
    """One 10 s batch from `host` in which every card in `gpus` holds `used_fraction` of 80 GiB."""
    end = at if at is not None else time.time()
    used = int(used_fraction * 80 * GIB)
    cards = [card_row(gpu, used_max=used, used_last=used) for gpu in gpus]
    return ingest_batch(batch(host, start=end - 10, end=end, cards=cards, events=events))


def oom_event(gpu, at: float, pid: int = 4242) -> dict:
    return {"kind": "oom", "ts": at, "card_index": gpu.index, "card_uuid": gpu.uuid,
            "detail": {"pid": pid, "message": "CUDA out of memory"}}  # fmt: skip


def matrix_objects(host) -> dict:
    """A firing alert on `host`, an active silence and a rule, for the permission matrix."""
    import datetime as dt

    from django.utils import timezone

    from console.alerts.models import Alert, AlertRule, Silence

    now = timezone.now()
    rule = AlertRule.objects.get(slug="card-memory-95")
    alert = Alert.objects.create(
        rule=rule,
        fingerprint=f"card_memory:{host.name}:0",
        state=Alert.State.FIRING,
        severity=rule.severity,
        labels={"Hostname": host.name, "gpu": "0"},
        values={"used_fraction": 0.97},
        host=host,
        started_at=now,
        firing_at=now,
        last_crossed_at=now,
    )
    silence = Silence.objects.create(
        matchers={"Hostname": host.name},
        comment="maintenance",
        starts_at=now,
        ends_at=now + dt.timedelta(hours=1),
    )
    return {"alert": alert, "silence": silence, "alert_rule": rule}


def rule_form(objects) -> dict:
    rule = objects["alert_rule"]
    return {
        "name": rule.name,
        "severity": "warning",
        "enabled": "on",
        "scope": "fleet",
        "scope_label": "",
        "for_s": "45",
        "resolve_after_s": "30",
        "repeat_interval_s": "600",
        "runbook_slug": rule.runbook_slug,
        "params": '{"used_fraction": 0.96}',
        "comment": "matrix",
    }


class Feeder:
    """A host agent's stand-in: every `interval` seconds, one batch through the real ingest
    path in which each card holds the fraction `fractions[gpu]` of 80 GiB."""

    def __init__(self, host, fractions: dict, interval: float = 1.0):
        import threading

        self.host, self.fractions, self.interval = host, dict(fractions), interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def set(self, gpu, fraction: float) -> None:
        self.fractions = {**self.fractions, gpu: fraction}

    def _run(self):
        from django.db import connection

        try:
            while not self._stop.wait(self.interval):
                end = time.time()
                cards = [
                    card_row(gpu, used_max=int(f * 80 * GIB), used_last=int(f * 80 * GIB))
                    for gpu, f in self.fractions.items()
                ]
                ingest_batch(batch(self.host, start=end - self.interval, end=end, cards=cards))
        finally:
            connection.close()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10)
