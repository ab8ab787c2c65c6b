"""Evaluation cycles over telemetry written by the real ingest path."""

import datetime as dt
import time

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.alerts.evaluator import LOCK_NAME, evaluate, run_cycle
from console.alerts.models import Alert, AlertRule, Notification
from console.alerts.services import do_acknowledge_alert, do_silence, do_unsilence
from inventory.models import CollectorStatus
from inventory.timeseries.locks import ProcessLock
from tests.console.alerts.support import oom_event, report_cards
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _channels(settings):
    settings.ALERT_WEBHOOK_URL = "http://127.0.0.1:9/hook"
    settings.ALERT_EMAIL_TO = []
    settings.ALERT_ALERTMANAGER_URL = ""


@pytest.fixture
def memory_rule():
    rule = AlertRule.objects.get(slug="card-memory-95")
    AlertRule.objects.exclude(pk=rule.pk).update(enabled=False)
    rule.for_s, rule.resolve_after_s, rule.repeat_interval_s = 30, 30, 600
    rule.save()
    return rule


def _host(cards=2):
    host = HostFactory()
    return host, [GpuFactory(host=host, index=i) for i in range(cards)]


def _at(now, seconds):
    return now + dt.timedelta(seconds=seconds)


def _webhooks():
    return list(Notification.objects.filter(channel="webhook").order_by("pk"))


def test_a_card_storm_fires_after_its_for_as_one_notification_per_host(memory_rule):
    host, gpus = _host(cards=3)
    report_cards(host, gpus[:2], 0.97)
    now = timezone.now()
    run_cycle(now)
    assert sorted(Alert.objects.values_list("state", flat=True)) == ["pending", "pending"]
    assert _webhooks() == []
    result = run_cycle(_at(now, 31))
    assert len(result.fired) == 2
    alerts = Alert.objects.filter(state="firing")
    assert sorted(a.labels["gpu"] for a in alerts) == ["0", "1"]
    assert {a.labels["UUID"] for a in alerts} == {gpus[0].uuid, gpus[1].uuid}
    assert all(a.values["used_fraction"] == pytest.approx(0.97, abs=1e-3) for a in alerts)
    (note,) = _webhooks()
    assert note.group == host.name and note.alerts.count() == 2
    assert {a["notification"] for a in note.payload["alerts"]} == {"firing"}
    assert note.payload["alerts"][0]["runbook_url"].endswith("/runbooks/oom-triage/")

    # A redelivered cycle on the same data decides nothing and sends nothing.
    again = run_cycle(_at(now, 31))
    assert again.fired == [] and again.notifications == []
    assert len(_webhooks()) == 1


def test_acknowledgement_stops_repeats_and_a_silence_stops_notifications_until_it_ends(
    memory_rule, personas
):
    host, gpus = _host(cards=2)
    report_cards(host, gpus, 0.99)
    now = timezone.now()
    run_cycle(now)
    run_cycle(_at(now, 31))
    assert len(_webhooks()) == 1
    card0 = Alert.objects.get(labels__gpu="0")
    do_acknowledge_alert(card0, acting_user=personas["oncall"], comment="draining card 0")
    AlertRule.objects.filter(pk=memory_rule.pk).update(repeat_interval_s=20)
    run_cycle(_at(now, 52))
    repeat = _webhooks()[-1]
    assert [(a["labels"]["gpu"], a["notification"]) for a in repeat.payload["alerts"]] == [
        ("1", "repeat")
    ]
    silence = do_silence(
        acting_user=personas["oncall"],
        matchers={"Hostname": host.name},
        duration=dt.timedelta(hours=1),
        comment="maintenance",
    )
    count = len(_webhooks())
    run_cycle(_at(now, 75))
    assert len(_webhooks()) == count, "silenced: nothing sent"
    do_unsilence(silence, acting_user=personas["oncall"])
    run_cycle(_at(now, 76))
    assert len(_webhooks()) == count + 1


def test_a_resolved_alert_sends_one_resolved_notification_after_its_hysteresis(memory_rule):
    host, gpus = _host(cards=1)
    report_cards(host, gpus, 0.97)
    now = timezone.now()
    run_cycle(now)
    run_cycle(_at(now, 31))
    report_cards(host, gpus, 0.50, at=time.time() + 40)
    run_cycle(_at(now, 45))
    assert Alert.objects.get().state == "firing", "clear for less than the hysteresis"
    run_cycle(_at(now, 62))
    alert = Alert.objects.get()
    assert alert.state == "resolved" and alert.ended_at == _at(now, 62)
    run_cycle(_at(now, 62))
    run_cycle(_at(now, 90))
    resolved = [n for n in _webhooks() if n.payload["alerts"][0]["notification"] == "resolved"]
    assert len(resolved) == 1 and resolved[0].payload["alerts"][0]["status"] == "resolved"


def test_an_oom_fires_at_once_and_resolves_when_its_window_passes():
    AlertRule.objects.exclude(slug="oom").update(enabled=False)
    host, gpus = _host(cards=1)
    report_cards(host, gpus, 0.5, events=[oom_event(gpus[0], time.time() - 1)])
    now = timezone.now()
    result = run_cycle(now)
    (alert,) = Alert.objects.filter(pk__in=result.fired)
    assert alert.rule.slug == "oom" and alert.labels["gpu"] == "0" and alert.values["count"] == 1
    run_cycle(_at(now, 301))
    alert.refresh_from_db()
    assert alert.state == "resolved"


def test_a_stale_collector_fires():
    AlertRule.objects.exclude(slug="collector-stale").update(enabled=False)
    host, gpus = _host(cards=1)
    report_cards(host, gpus, 0.5)
    now = timezone.now()
    assert run_cycle(now).fired == []
    last = CollectorStatus.objects.get(host=host).last_sample_at
    result = run_cycle(last + dt.timedelta(seconds=121))
    (alert,) = Alert.objects.filter(pk__in=result.fired)
    assert alert.labels == {"Hostname": host.name, "host": host.name}


def test_a_rule_scoped_to_a_host_label_watches_only_those_hosts(memory_rule):
    memory_rule.scope, memory_rule.scope_label, memory_rule.for_s = "host_label", "rack=r9", 0
    memory_rule.save()
    inside, in_gpus = _host(cards=1)
    inside.labels = {"rack": "r9"}
    inside.save()
    outside, out_gpus = _host(cards=1)
    report_cards(inside, in_gpus, 0.99)
    report_cards(outside, out_gpus, 0.99)
    run_cycle(timezone.now())
    assert list(Alert.objects.values_list("host__name", flat=True)) == [inside.name]


def test_disabling_a_rule_resolves_its_alerts(memory_rule):
    memory_rule.for_s = 0
    memory_rule.save()
    host, gpus = _host(cards=1)
    report_cards(host, gpus, 0.99)
    now = timezone.now()
    run_cycle(now)
    AlertRule.objects.filter(pk=memory_rule.pk).update(enabled=False)
    run_cycle(_at(now, 1))
    assert Alert.objects.get().state == "resolved"


def test_one_evaluator_at_a_time():
    held = ProcessLock(LOCK_NAME)
    assert held.acquire()
    try:
        assert evaluate() is None
    finally:
        held.release()
    assert evaluate() is not None


def test_the_query_count_of_a_cycle_does_not_grow_with_the_fleet():
    def queries_with(hosts):
        for _ in range(hosts):
            host, gpus = _host(cards=2)
            report_cards(host, gpus, 0.99)
        Alert.objects.all().delete()
        now = timezone.now()
        with CaptureQueriesContext(connection) as captured:
            run_cycle(now)
        return [q["sql"][:70] for q in captured if "SAVEPOINT" not in q["sql"]]

    assert queries_with(1) == queries_with(4)


def test_a_notification_lost_on_its_way_is_sent_again_by_a_later_evaluation(memory_rule):
    from unittest import mock

    from console.alerts import tasks

    memory_rule.for_s = 0
    memory_rule.save()
    host, gpus = _host(cards=1)
    report_cards(host, gpus, 0.99)
    run_cycle(timezone.now())
    (note,) = _webhooks()
    Notification.objects.filter(pk=note.pk).update(
        created_at=timezone.now() - tasks.STALLED_AFTER - dt.timedelta(seconds=1)
    )
    with mock.patch.object(tasks.deliver_notification, "delay") as queued:
        tasks.evaluate_alerts()
    queued.assert_any_call(note.pk)


def test_a_delivery_that_fails_is_retried_and_one_that_succeeded_is_not_sent_again(memory_rule):
    from console.alerts import tasks
    from tests.console.alerts.receivers import Receiver

    memory_rule.for_s = 0
    memory_rule.save()
    host, gpus = _host(cards=1)
    report_cards(host, gpus, 0.99)
    run_cycle(timezone.now())
    (note,) = _webhooks()
    from celery.exceptions import Retry

    with pytest.raises(Retry):  # nobody listens on port 9
        tasks.deliver_notification.apply(args=[note.pk], throw=True)
    note.refresh_from_db()
    assert (note.status, note.attempts) == (
        "pending",
        1,
    ) and "Connection refused" in note.last_error
    receiver = Receiver()
    try:
        with override_settings(ALERT_WEBHOOK_URL=receiver.url):
            assert tasks.deliver_notification.apply(args=[note.pk]).get() == "sent"
            assert tasks.deliver_notification.apply(args=[note.pk]).get() == "nothing to do"
    finally:
        receiver.close()
    assert len(receiver.bodies) == 1 and receiver.bodies[0]["group"] == host.name
