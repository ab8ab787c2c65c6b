"""State changes to inventory records, each in one transaction with its audit row."""

from django.db import transaction
from django.utils import timezone

from console import audit
from inventory.models import Event


class AlreadyAcknowledged(Exception):
    pass


@transaction.atomic
def do_acknowledge_event(event: Event, *, acting_user) -> Event:
    locked = Event.objects.select_for_update().get(pk=event.pk)
    if locked.acknowledged_at is not None:
        raise AlreadyAcknowledged(
            f"already acknowledged by {locked.acknowledged_by} at {locked.acknowledged_at:%H:%M}"
        )
    before = audit.snapshot(locked)
    locked.acknowledged_by = acting_user
    locked.acknowledged_at = timezone.now()
    locked.save(update_fields=["acknowledged_by", "acknowledged_at"])
    audit.record(
        actor=acting_user,
        action="event.acknowledge",
        obj=locked,
        before=before,
        after=audit.snapshot(locked),
        host=locked.host,
    )
    return locked
