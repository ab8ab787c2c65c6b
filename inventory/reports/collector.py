"""A host collector's health: how old its newest sample is, and what its agent reported."""

import datetime as dt

from django.conf import settings

from inventory.models import CollectorStatus


def collector_health(status: CollectorStatus | None, now: dt.datetime) -> dict:
    last = status.last_sample_at if status else None
    age = (now - last).total_seconds() if last else None
    return {
        "last_sample_at": last,
        "age_s": age,
        "stale": age is None or age > settings.COLLECTOR_STALE_AFTER_S,
        "batches": status.batches if status else 0,
        "missing_batches": status.missing_batches if status else 0,
        "faults_last_batch": status.faults_last_batch if status else 0,
        "outbox_depth": status.outbox_depth if status else 0,
        "outbox_dropped": status.outbox_dropped if status else 0,
    }
