"""State changes to inventory records, each one change (transaction and change id) audited."""

from contextlib import contextmanager

from django.utils import timezone

from console.core.auditing import Action
from console.core.auditing.changes import atomic_change, audited, open_change
from inventory.ingest import dead_letters
from inventory.models import DeadLetter, Deployment, Event, Host, ServedModel
from inventory.models.fleet import new_agent_secret
from inventory.wire.schema import BatchRejected


class AlreadyAcknowledged(Exception):
    pass


@atomic_change
def do_acknowledge_event(event: Event, *, acting_user) -> Event:
    locked = Event.objects.select_for_update().get(pk=event.pk)
    if locked.acknowledged_at is not None:
        raise AlreadyAcknowledged(
            f"already acknowledged by {locked.acknowledged_by} at {locked.acknowledged_at:%H:%M}"
        )
    with audited(locked, Action.EVENT_ACKNOWLEDGE, acting_user, host=locked.host):
        locked.acknowledged_by = acting_user
        locked.acknowledged_at = timezone.now()
        locked.save(update_fields=["acknowledged_by", "acknowledged_at"])
    return locked


class AlreadyResolved(Exception):
    pass


def _dead_letter_state(letter: DeadLetter) -> dict:
    # The stored message itself is not repeated in the trail: it stays on the dead letter.
    return {
        "status": letter.status,
        "reason_code": letter.reason_code,
        "reason": letter.reason,
        "reason_message": letter.reason_message,
        "replays": letter.replays,
        "batch_id": letter.batch_id,
        "host_name": letter.host_name,
    }


@contextmanager
def _changing(letter: DeadLetter, action: Action, acting_user, comment: str = ""):
    """The pending letter, locked; saved and audited once the caller has changed it."""
    locked = DeadLetter.objects.select_for_update().get(pk=letter.pk)
    if locked.status != DeadLetter.Status.PENDING:
        raise AlreadyResolved(f"already {locked.get_status_display().lower()}")
    with audited(locked, action, acting_user, comment=comment, state=_dead_letter_state):
        yield locked
        locked.save()


def _resolve(letter: DeadLetter, status: str, acting_user) -> None:
    letter.status = status
    letter.resolved_by = acting_user if acting_user and acting_user.is_authenticated else None
    letter.resolved_at = timezone.now()


def do_replay_dead_letter(letter: DeadLetter, *, acting_user) -> BatchRejected | None:
    """Run a dead letter through ingest again; the rejection if it fails again, else None.

    Ingest writes in transactions of its own and writes a batch once however often it is
    replayed, so the replay runs before the letter is locked and marked, not inside that.
    """
    if not DeadLetter.objects.filter(pk=letter.pk, status=DeadLetter.Status.PENDING).exists():
        raise AlreadyResolved("already replayed or discarded")
    try:
        outcome = dead_letters.replay(letter)
    except Exception as error:  # the same failure the worker met: it stays a dead letter
        outcome = BatchRejected("write_failed", "error", error=f"{type(error).__name__}: {error}")
    with (
        open_change(acting_user),
        _changing(letter, Action.DEAD_LETTER_REPLAY, acting_user) as locked,
    ):
        locked.replays += 1
        if isinstance(outcome, BatchRejected):
            locked.reason_code, locked.reason_path = outcome.code, outcome.path
            locked.reason = outcome.message
            locked.reason_message = dead_letters.storable(outcome)
        else:
            _resolve(locked, DeadLetter.Status.REPLAYED, acting_user)
    return outcome if isinstance(outcome, BatchRejected) else None


@atomic_change
def do_discard_dead_letter(letter: DeadLetter, *, acting_user, comment: str = "") -> None:
    with _changing(letter, Action.DEAD_LETTER_DISCARD, acting_user, comment) as locked:
        _resolve(locked, DeadLetter.Status.DISCARDED, acting_user)


@atomic_change
def do_rotate_agent_secret(host: Host, *, acting_user) -> Host:
    """A new secret for the host's agent: batches signed with the old one are refused."""
    locked = Host.objects.select_for_update().get(pk=host.pk)
    with audited(locked, Action.HOST_ROTATE_SECRET, acting_user, host=locked):
        locked.agent_secret = new_agent_secret()
        locked.save(update_fields=["agent_secret", "updated_at"])
    return locked


@atomic_change
def do_register_runtime(
    deployment: Deployment, *, acting_user, runtime_name: str, endpoint_url: str
) -> Deployment:
    """What the serving stack calls a running deployment (the host agent maps its processes by
    that name) and where its inference API answers (load tests send to it)."""
    locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
    with audited(locked, Action.DEPLOYMENT_CHANGE, acting_user, host=locked.host,
                 comment="registered with the host agent"):  # fmt: skip
        locked.runtime_name = runtime_name
        locked.endpoint_url = endpoint_url
        locked.save(update_fields=["runtime_name", "endpoint_url", "updated_at"])
    return locked


@atomic_change
def do_set_model_priority(
    served_model: ServedModel, *, acting_user, priority: int, comment: str = ""
) -> ServedModel:
    """Which models the solver places first and which ones degradation sheds first (lower is
    more important). The model is served on any number of hosts, so its row names none."""
    locked = ServedModel.objects.select_for_update().get(pk=served_model.pk)
    if locked.priority == priority:
        return locked
    with audited(locked, Action.SERVED_MODEL_PRIORITY, acting_user, comment=comment):
        locked.priority = priority
        locked.save(update_fields=["priority"])
    return locked
