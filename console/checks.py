"""System checks on settings that are valid one by one but wrong together."""

from django.conf import settings
from django.core import checks
from django.core.checks import Error, register


@register("celery")
def visibility_timeout_outlasts_tasks(app_configs, **kwargs) -> list[Error]:
    """Redis hands an unacked message out again after the visibility timeout
    (inventory.wire.broker).

    Tasks are acknowledged when they end (acks_late), so one that runs longer than the timeout
    would be started a second time by another worker while the first still runs.
    """
    timeout = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("visibility_timeout")
    if timeout is None or timeout > settings.CELERY_TASK_TIME_LIMIT:
        return []
    return [
        Error(
            f"BROKER_VISIBILITY_TIMEOUT_S={timeout:g} is not longer than "
            f"CELERY_TASK_TIME_LIMIT={settings.CELERY_TASK_TIME_LIMIT}: Redis would hand a "
            "task that is still running to a second worker.",
            hint="Set BROKER_VISIBILITY_TIMEOUT_S above the task time limit "
            "(and above the longest ingest group write), e.g. the time limit + 60.",
            id="console.E001",
        )
    ]


@register()
def host_summaries_outlast_their_interval(app_configs, **kwargs) -> list[checks.Warning]:
    """The fleet board uses a run of the summary job only while it is younger than
    HOST_SUMMARY_STALE_AFTER_S (inventory.reports.board): one that is not longer than the
    job's interval makes the board compute every host's figures on every request for part
    of each interval, as it did before the summaries."""
    interval, limit = settings.HOST_SUMMARY_INTERVAL_S, settings.HOST_SUMMARY_STALE_AFTER_S
    if limit > interval:
        return []
    return [
        checks.Warning(
            f"HOST_SUMMARY_STALE_AFTER_S={limit:g} is not longer than "
            f"HOST_SUMMARY_INTERVAL_S={interval:g}: the fleet board would find its summaries "
            "stale before the next run and compute every host live.",
            hint="Set HOST_SUMMARY_STALE_AFTER_S to a few intervals, e.g. 3 x the interval.",
            id="console.W001",
        )
    ]
