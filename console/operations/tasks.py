"""Celery tasks of host operations: they take primary keys or signed bodies, are idempotent
and have time limits."""

from celery import shared_task
from django.utils import timezone

from console.operations import messages, services
from console.operations.degradation import on_card_over_limit as degrade
from console.operations.off_peak import plan_for
from console.operations.watch import watch as run_watch
from inventory.models import Host


@shared_task(
    name="operations.record_action_outcome", time_limit=30, soft_time_limit=25, ignore_result=True
)
def record_action_outcome(body: str, signature: str | None) -> None:
    """An agent's report of a host action (signed with its host's secret)."""

    outcome = messages.verified_outcome(body, signature)
    if outcome is not None:
        services.do_record_outcome(outcome)


@shared_task(name="operations.watch", time_limit=120, soft_time_limit=110, ignore_result=True)
def watch() -> dict:

    return run_watch(timezone.now())


@shared_task(
    name="operations.on_card_over_limit", time_limit=30, soft_time_limit=25, ignore_result=True
)
def on_card_over_limit(card_pk: int, event_pk: int | None = None) -> int | None:
    """For alerting: degrade this card if it is past its limit; the run's id, if one runs."""

    run = degrade(card_pk, event_pk=event_pk)
    return run.pk if run else None


@shared_task(name="operations.plan_off_peak", time_limit=600, soft_time_limit=590)
def plan_off_peak() -> int:
    """Propose the next trough's reloads for every active host that needs some."""

    now = timezone.now()
    hosts = Host.objects.filter(status=Host.Status.ACTIVE).prefetch_related("gpus")
    return sum(plan_for(host, now) is not None for host in hosts)
