"""The console's alerts in a real Alertmanager: grouped per host, deduplicated, resolved."""

import time

import pytest
from django.utils import timezone

from console.alerts.delivery import deliver
from console.alerts.evaluator import run_cycle
from console.alerts.models import AlertRule, Notification
from tests.console.alerts.receivers import alertmanager, firing_and_resolved, receiver  # noqa: F401
from tests.console.alerts.support import report_cards
from tests.factories import GpuFactory, HostFactory
from tests.processes import wait_for

pytestmark = pytest.mark.django_db


def _deliver_new(since_pk: int) -> list[Notification]:
    notes = list(Notification.objects.filter(channel="alertmanager", pk__gt=since_pk))
    for note in notes:
        deliver(note)
    return notes


def test_a_card_storm_arrives_as_one_group_once_and_resolves(settings, alertmanager):  # noqa: F811
    url, received = alertmanager
    settings.ALERT_ALERTMANAGER_URL = url
    settings.ALERT_WEBHOOK_URL = ""
    settings.ALERT_ALERTMANAGER_RESEND_S = 1
    AlertRule.objects.exclude(slug="card-memory-95").update(enabled=False)
    AlertRule.objects.filter(slug="card-memory-95").update(for_s=0, resolve_after_s=0)
    host = HostFactory()
    gpus = [GpuFactory(host=host, index=i) for i in range(3)]
    report_cards(host, gpus, 0.99)
    # Real time throughout: Alertmanager judges endsAt by its own clock.
    run_cycle(timezone.now())
    (note,) = _deliver_new(0)
    assert len(note.payload) == 3
    wait_for(lambda: firing_and_resolved(received.bodies)[0], 20, "the firing group")
    # Re-posted by the next resend (and once more by hand): Alertmanager deduplicates.
    time.sleep(1.1)
    run_cycle(timezone.now())
    _deliver_new(note.pk)
    deliver(note)
    time.sleep(3)  # three group intervals: room for a duplicate to show, were there one
    firing, _ = firing_and_resolved(received.bodies)
    assert len(firing) == 1, firing
    (group,) = firing
    assert group["groupLabels"] == {"Hostname": host.name}
    assert sorted(a["labels"]["gpu"] for a in group["alerts"]) == ["0", "1", "2"]
    labels = group["alerts"][0]["labels"]
    assert labels["alertname"] == "card-memory-95" and labels["severity"] == "critical"
    assert {labels["UUID"]} <= {gpu.uuid for gpu in gpus}
    assert labels["modelName"] == gpus[0].product_name
    assert group["alerts"][0]["annotations"]["runbook_url"].endswith("/runbooks/oom-triage/")

    last = Notification.objects.order_by("pk").last().pk
    report_cards(host, gpus, 0.5)
    run_cycle(timezone.now())
    _deliver_new(last)
    wait_for(lambda: firing_and_resolved(received.bodies)[1], 20, "the resolved group")
    (resolved,) = firing_and_resolved(received.bodies)[1]
    assert resolved["groupLabels"] == {"Hostname": host.name}
    assert {a["status"] for a in resolved["alerts"]} == {"resolved"}
    assert len(resolved["alerts"]) == 3
