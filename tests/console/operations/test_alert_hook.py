"""Alerting's hook: a card memory or OOM alert that starts firing degrades its card at once,
through the queued task, without waiting for the watch's poll."""

import pytest
from django.utils import timezone

from console.alerts.evaluator import run_cycle
from console.alerts.models import Alert, AlertRule
from console.alerts.signals import alert_fired
from console.operations import services
from console.operations.models import DegradationRun, StandingPolicy
from inventory.models import Event
from tests.console.proposals.support import tasks_in_process
from tests.factories import GIB

pytestmark = pytest.mark.django_db


@pytest.fixture
def only_rule(settings):
    settings.ALERT_WEBHOOK_URL = ""
    settings.ALERT_EMAIL_TO = []
    settings.ALERT_ALERTMANAGER_URL = ""

    def enable(slug):
        rule = AlertRule.objects.get(slug=slug)
        AlertRule.objects.exclude(pk=rule.pk).update(enabled=False)
        rule.for_s = 0  # fires on its first crossing: the test needs one cycle
        rule.save()
        return rule

    return enable


def _fire(django_capture_on_commit_callbacks):
    # The evaluator sends alert_fired after its cycle committed; the hook queues the task,
    # which runs here as the worker would run it.
    with tasks_in_process(), django_capture_on_commit_callbacks(execute=True):
        result = run_cycle(timezone.now())
    assert result.fired
    return result


def test_a_card_memory_alert_degrades_its_card_at_once(
    personas, card, only_rule, django_capture_on_commit_callbacks
):
    gpu, _, cheap = card
    only_rule("card-memory-95")
    services.do_sign_policy(
        acting_user=personas["approver"], host=gpu.host, kind=StandingPolicy.Kind.DEGRADATION
    )
    assert not DegradationRun.objects.exists()  # nothing polled: only the alert can start it
    _fire(django_capture_on_commit_callbacks)
    run = DegradationRun.objects.get(gpu=gpu)
    assert (run.trigger, run.state) == (DegradationRun.Trigger.USAGE, DegradationRun.State.ACTING)
    assert (run.plan[0]["kind"], run.plan[0]["deployment_id"]) == ("shrink_kv", cheap.pk)


def test_an_oom_alert_degrades_its_card_for_that_oom(
    personas, card, only_rule, django_capture_on_commit_callbacks
):
    gpu = card[0]
    only_rule("oom")
    services.do_sign_policy(
        acting_user=personas["approver"], host=gpu.host, kind=StandingPolicy.Kind.DEGRADATION
    )
    oom = Event.objects.create(
        host=gpu.host, gpu=gpu, kind=Event.Kind.OOM, at=timezone.now(),
        detail={"requested_bytes": 6 * GIB, "free_bytes": GIB, "pid": 200},
        batch_id="00000000-0000-4000-8000-000000000011", position=0,
    )  # fmt: skip
    _fire(django_capture_on_commit_callbacks)
    run = DegradationRun.objects.get(gpu=gpu)
    assert (run.trigger, run.event_id) == (DegradationRun.Trigger.OOM, oom.pk)


def test_alerts_that_say_nothing_about_a_cards_memory_trigger_nothing(personas, card):
    gpu = card[0]
    services.do_sign_policy(
        acting_user=personas["approver"], host=gpu.host, kind=StandingPolicy.Kind.DEGRADATION
    )
    with tasks_in_process():
        for slug in ("headroom-low", "process-restart"):
            alert_fired.send(sender=AlertRule, alert=_alert(AlertRule.objects.get(slug=slug), gpu))
        # A card memory alert without a card (a host-wide one) names nothing to degrade.
        alert_fired.send(
            sender=AlertRule, alert=_alert(AlertRule.objects.get(slug="card-memory-95"), None)
        )
    assert not DegradationRun.objects.exists()


def _alert(rule, gpu):
    now = timezone.now()
    return Alert(
        rule=rule, fingerprint="f", state=Alert.State.FIRING, severity=rule.severity,
        host=gpu.host if gpu else None, gpu=gpu, started_at=now, last_crossed_at=now,
    )  # fmt: skip
