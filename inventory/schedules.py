"""Each collected host has its own beat entry that sends it its collection plan.

The entries live in django-celery-beat's tables, so beat picks up a host added, paused or
removed at run time without a restart.
"""

import json

from django.conf import settings
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from inventory.models import Host


def schedule_name(host: Host) -> str:
    return f"collection plan: {host.name}"


def sync_host_schedule(host: Host) -> None:
    collected = host.collector != Host.Collector.NONE and host.status != Host.Status.RETIRED
    seconds = max(1, round(settings.COLLECTION_PLAN_INTERVAL_S))
    interval, _ = IntervalSchedule.objects.get_or_create(
        every=seconds, period=IntervalSchedule.SECONDS
    )
    PeriodicTask.objects.update_or_create(
        name=schedule_name(host),
        defaults={
            "task": "inventory.send_collection_plan",
            "interval": interval,
            "args": json.dumps([host.pk]),
            "enabled": collected,
        },
    )


def remove_host_schedule(host: Host) -> None:
    PeriodicTask.objects.filter(name=schedule_name(host)).delete()
