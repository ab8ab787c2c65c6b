"""End to end: beat evaluates every 2 s, a real Celery worker evaluates and delivers, the
broker carries it, telemetry lands through the real ingest path, and a webhook receiver and a
real Alertmanager of the test's own receive the notifications."""

import datetime as dt

import pytest

from console.alerts.models import Alert, AlertRule
from console.alerts.services import do_acknowledge_alert, do_silence
from console.celery import app
from tests.console.alerts.receivers import Receiver, alertmanager, firing_and_resolved, receiver  # noqa: F401
from tests.console.alerts.support import Feeder
from tests.factories import GpuFactory, HostFactory, UserFactory
from tests.isolated_broker import IsolatedBroker
from tests.processes import Processes, database_url_for_processes, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

RULE = "card-memory-95"


def _start(tmp_path, broker: IsolatedBroker, env: dict) -> Processes:
    env = {"DATABASE_URL": database_url_for_processes(), "ALERT_EVALUATION_INTERVAL_S": "2",
           "ALERT_ALERTMANAGER_RESEND_S": "2", **env}  # fmt: skip
    env |= broker.env
    processes = Processes(env, tmp_path)
    processes.celery_worker("central", "celery")
    processes.beat(tmp_path)
    return processes


def _logs(processes):
    return lambda: "\n".join(
        f"--- {name} ---\n{processes.log(name)[-3000:]}" for name in ("central", "beat")
    )


def _ours(bodies, kind=None):
    """The webhook's (alert, notification kind) pairs of the card memory rule."""
    return [
        (alert["labels"]["gpu"], alert["notification"])
        for body in bodies
        for alert in body["alerts"]
        if alert["rule"] == RULE and (kind is None or alert["notification"] == kind)
    ]


@pytest.fixture
def rule():
    AlertRule.objects.filter(slug=RULE).update(for_s=4, resolve_after_s=2, repeat_interval_s=0)
    return AlertRule.objects.get(slug=RULE)


def test_a_held_card_fires_once_repeats_until_acknowledged_silences_expire_and_it_resolves(
    tmp_path,
    rule,
    receiver,  # noqa: F811
    isolated_broker,
):
    host = HostFactory()
    gpus = [GpuFactory(host=host, index=i) for i in range(2)]
    processes = _start(tmp_path, isolated_broker, {"ALERT_WEBHOOK_URL": receiver.url})
    feeder = Feeder(host, {gpus[0]: 0.97, gpus[1]: 0.50}).start()
    logs = _logs(processes)
    try:
        wait_for(lambda: _ours(receiver.bodies), 90, "the firing notification", logs)
        fired = Alert.objects.get(rule=rule, state="firing")
        assert (fired.firing_at - fired.started_at).total_seconds() >= rule.for_s
        # Redelivered and duplicated evaluations: nothing is sent twice.
        for _ in range(3):
            app.send_task("alerts.evaluate")
        wait_for(lambda: _evaluations(processes) >= 6, 60, "more evaluations", logs)
        assert _ours(receiver.bodies) == [("0", "firing")]

        # Repeats while nobody acknowledges; none after.
        AlertRule.objects.filter(pk=rule.pk).update(repeat_interval_s=2)
        wait_for(lambda: _ours(receiver.bodies, "repeat"), 60, "a repeat", logs)
        do_acknowledge_alert(fired, acting_user=UserFactory(), comment="draining")
        settled = len(_ours(receiver.bodies, "repeat"))
        done = _evaluations(processes)
        wait_for(lambda: _evaluations(processes) >= done + 3, 60, "three evaluations", logs)
        assert len(_ours(receiver.bodies, "repeat")) <= settled + 1  # one may have been queued

        # Card 1 crosses during a silence of its host: nothing until the silence ends.
        do_silence(acting_user=UserFactory(), matchers={"Hostname": host.name, "gpu": "1"},
                   duration=dt.timedelta(seconds=12), comment="maintenance")  # fmt: skip
        feeder.set(gpus[1], 0.99)
        wait_for(
            lambda: Alert.objects.filter(rule=rule, state="firing", labels__gpu="1").exists(),
            60, "card 1 firing", logs,
        )  # fmt: skip
        assert ("1", "firing") not in _ours(receiver.bodies)
        wait_for(lambda: ("1", "firing") in _ours(receiver.bodies), 60, "after the silence", logs)

        # Both clear: one resolved notification each.
        feeder.set(gpus[0], 0.5)
        feeder.set(gpus[1], 0.5)
        wait_for(lambda: len(_ours(receiver.bodies, "resolved")) == 2, 60, "resolved", logs)
        done = _evaluations(processes)
        wait_for(lambda: _evaluations(processes) >= done + 3, 60, "three evaluations", logs)
        assert sorted(_ours(receiver.bodies, "resolved")) == [("0", "resolved"), ("1", "resolved")]
    finally:
        feeder.stop()
        processes.stop()


def _evaluations(processes) -> int:
    return processes.log("central").count("Task alerts.evaluate[") // 2  # received + succeeded


def test_alertmanager_receives_them_grouped_and_resolved(
    tmp_path,
    rule,
    alertmanager,  # noqa: F811
    isolated_broker,
):
    url, received = alertmanager
    AlertRule.objects.exclude(pk=rule.pk).update(enabled=False)  # one rule's group to watch
    host = HostFactory()
    gpus = [GpuFactory(host=host, index=i) for i in range(3)]
    processes = _start(tmp_path, isolated_broker, {"ALERT_ALERTMANAGER_URL": url})
    feeder = Feeder(host, dict.fromkeys(gpus, 0.98)).start()
    logs = _logs(processes)
    try:
        wait_for(lambda: firing_and_resolved(received.bodies)[0], 90, "the firing group", logs)
        (group, *more) = firing_and_resolved(received.bodies)[0]
        assert group["groupLabels"] == {"Hostname": host.name}
        assert sorted(a["labels"]["gpu"] for a in group["alerts"]) == ["0", "1", "2"], more
        for gpu in gpus:
            feeder.set(gpu, 0.5)
        wait_for(lambda: firing_and_resolved(received.bodies)[1], 90, "the resolved group", logs)
        (resolved,) = firing_and_resolved(received.bodies)[1]
        assert {a["status"] for a in resolved["alerts"]} == {"resolved"}
        assert len(resolved["alerts"]) == 3
    finally:
        feeder.stop()
        processes.stop()
