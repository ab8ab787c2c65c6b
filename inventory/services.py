"""State changes to inventory records, each one change (transaction and change id) audited."""

from django.utils import timezone

from console.audit import Action, snapshot
from console.audit.changes import atomic_change, record
from inventory.models import Event


class AlreadyAcknowledged(Exception):
    pass


@atomic_change
def do_acknowledge_event(event: Event, *, acting_user) -> Event:
    locked = Event.objects.select_for_update().get(pk=event.pk)
    if locked.acknowledged_at is not None:
        raise AlreadyAcknowledged(
            f"already acknowledged by {locked.acknowledged_by} at {locked.acknowledged_at:%H:%M}"
        )
    before = snapshot(locked)
    locked.acknowledged_by = acting_user
    locked.acknowledged_at = timezone.now()
    locked.save(update_fields=["acknowledged_by", "acknowledged_at"])
    record(
        actor=acting_user,
        action=Action.EVENT_ACKNOWLEDGE,
        obj=locked,
        before=before,
        after=snapshot(locked),
        host=locked.host,
    )
    return locked
