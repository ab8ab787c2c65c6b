"""The alerts pages and API: what people see, and their audited actions."""

import re

import pytest
import yaml
from django.core.management import call_command

from console.alerts.models import Alert, AlertRule, Silence
from console.core.auditing.models import AuditEntry
from tests.console.alerts.support import matrix_objects
from tests.factories import GpuFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def objects():
    gpu = GpuFactory(index=0)
    return {"host": gpu.host, "gpu": gpu, **matrix_objects(gpu.host)}


def test_the_alerts_page_lists_firing_alerts_with_counts_and_runbook_links(client_as, objects):
    response = client_as("manager").get("/alerts/")
    page = response.content.decode()
    assert response.status_code == 200
    assert objects["alert_rule"].name in page
    assert "/runbooks/oom-triage/" in page
    assert f'href="?state=firing&amp;host={objects["host"].name}"' in page
    # The navigation badge counts firing alerts.
    assert 'class="badge badge-firing"' in page


def test_silenced_firing_alerts_have_their_own_tab(client_as, objects):
    page = client_as("oncall").get("/alerts/?state=silenced").content.decode()
    assert f"/alerts/{objects['alert'].pk}/" in page
    Silence.objects.update(ends_at=objects["silence"].starts_at)
    page = client_as("oncall").get("/alerts/?state=silenced").content.decode()
    assert f"/alerts/{objects['alert'].pk}/" not in page


def test_the_host_page_and_fleet_board_show_firing_alerts(client_as, objects):
    host = objects["host"]
    for path in (f"/hosts/{host.name}/", "/"):
        page = client_as("oncall").get(path).content.decode()
        assert 'id="firing-alerts"' in page, path
        assert f"/alerts/{objects['alert'].pk}/" in page
        assert "/runbooks/oom-triage/" in page


def test_the_api_lists_firing_alerts_with_dcgm_labels(client_as, objects):
    Alert.objects.create(
        rule=objects["alert_rule"], fingerprint="old", state="resolved", severity="critical",
        started_at=objects["alert"].started_at, last_crossed_at=objects["alert"].started_at,
    )  # fmt: skip
    answer = client_as("manager").get("/api/alerts/?state=firing").json()
    assert answer["count"] == 1
    (row,) = answer["results"]
    assert row["labels"]["Hostname"] == objects["host"].name
    assert row["labels"]["alertname"] == "card-memory-95"
    assert row["runbook_url"].endswith("/runbooks/oom-triage/")
    assert client_as("manager").get("/api/alerts/?state=nonsense").status_code == 400
    schema = client_as("manager").get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert "/api/alerts/" in schema["paths"]


def test_acknowledging_is_audited_and_needs_a_comment(client_as, objects):
    alert = objects["alert"]
    client = client_as("oncall")
    client.post(f"/alerts/{alert.pk}/acknowledge/", {"comment": ""})
    alert.refresh_from_db()
    assert alert.acknowledged_at is None
    client.post(f"/alerts/{alert.pk}/acknowledge/", {"comment": "draining the card"})
    alert.refresh_from_db()
    assert alert.acknowledged_by.username == "oncall"
    entry = AuditEntry.objects.get(action="alert.acknowledge")
    assert entry.comment == "draining the card" and entry.host == objects["host"]


def test_silences_refuse_unknown_labels_and_are_audited(client_as, objects):
    client = client_as("approver")
    bad = client.post(
        "/alerts/silences/new/", {"matchers": "rack=r1", "minutes": 10, "comment": "x"}
    )
    assert bad.status_code == 400 and b"Not a label alerts carry" in bad.content
    garbled = client.post("/alerts/silences/new/", {"matchers": "Hostname", "minutes": 10,
                                                    "comment": "x"})  # fmt: skip
    assert garbled.status_code == 400
    ok = client.post(
        "/alerts/silences/new/", {"matchers": "gpu=3\nHostname=h", "minutes": 10, "comment": "x"}
    )
    assert ok.status_code == 302
    silence = Silence.objects.get(matchers={"gpu": "3", "Hostname": "h"})
    client.post(f"/alerts/silences/{silence.pk}/end/")
    assert set(AuditEntry.objects.values_list("action", flat=True)) >= {
        "alert.silence", "alert.unsilence"}  # fmt: skip


def test_rule_edits_are_audited_and_bad_parameters_refused(client_as, objects):
    from tests.console.alerts.support import rule_form

    rule = objects["alert_rule"]
    client = client_as("approver")
    bad = client.post(f"/alerts/rules/{rule.slug}/edit/", {**rule_form(objects), "params": "{"})
    assert bad.status_code == 400
    negative = client.post(f"/alerts/rules/{rule.slug}/edit/", {**rule_form(objects),
                                                                 "for_s": "-1"})  # fmt: skip
    assert negative.status_code == 400
    client.post(f"/alerts/rules/{rule.slug}/edit/", rule_form(objects))
    rule.refresh_from_db()
    assert (rule.for_s, rule.params, rule.version) == (45, {"used_fraction": 0.96}, 2)
    entry = AuditEntry.objects.get(action="alert.rule_update")
    assert entry.before["for_s"] == 30 and entry.after["for_s"] == 45


def test_the_default_rules_are_installed():
    kinds = set(AlertRule.objects.values_list("kind", flat=True))
    assert kinds == set(AlertRule.Kind.values)
    events = {r.params["event_kind"] for r in AlertRule.objects.filter(kind="event")}
    assert events == {"oom", "process_restart", "mps_server_down", "xid", "gpu_lost"}


def test_the_prometheus_rule_file_names_only_metrics_the_console_exports(capsys, client_as):
    call_command("alert_rules")
    rules = yaml.safe_load(capsys.readouterr().out)["groups"][0]["rules"]
    names = {rule["alert"] for rule in rules}
    assert {"headroom-low", "collector-stale", "oom"} <= names
    assert "mps-server-down" not in names
    metrics = client_as("manager").get("/metrics").content.decode()
    for rule in rules:
        metric = re.search(r"gpu_console_\w+", rule["expr"]).group()
        assert f"# HELP {metric} " in metrics, metric
    stale = next(rule for rule in rules if rule["alert"] == "collector-stale")
    assert stale["expr"] == "gpu_console_collector_last_sample_age_seconds > 120"
    assert stale["labels"]["severity"] == "critical"
    # OOMs are a counter: a rule asks for its increase over the window.
    oom = next(rule for rule in rules if rule["alert"] == "oom")
    assert oom["expr"] == "increase(gpu_console_oom_events_total[300s]) > 0"


@pytest.mark.parametrize(
    "query",
    ["state=bogus", "severity=loud", "rule=no-such-rule", "page=abc", "page=99999", "q=%00x"],
)
def test_hostile_filters_on_the_page_never_fail(client_as, objects, query):
    response = client_as("oncall").get(f"/alerts/?{query}")
    assert response.status_code in (200, 400), response.status_code


def test_hostile_silences_and_rule_edits_are_refused_with_a_reason(client_as, objects):
    from tests.console.alerts.support import rule_form

    client = client_as("approver")
    too_long = client.post("/alerts/silences/new/", {"matchers": "gpu=1", "minutes": 10**9,
                                                     "comment": "x"})  # fmt: skip
    assert too_long.status_code == 400
    rule = objects["alert_rule"]
    unknown_host = client.post(
        f"/alerts/rules/{rule.slug}/edit/", {**rule_form(objects), "scope": "host", "host": "999"}
    )
    assert unknown_host.status_code == 400
    no_target = client.post(f"/alerts/rules/{rule.slug}/edit/", {**rule_form(objects),
                                                                  "scope": "host"})  # fmt: skip
    assert no_target.status_code == 400
    assert client.get("/alerts/999999/").status_code == 404


def test_event_rows_on_the_host_page_link_to_their_rules_runbook(client_as, objects):
    from inventory.models import Event

    Event.objects.create(
        host=objects["host"],
        gpu=objects["gpu"],
        kind="mps_server_down",
        at=objects["alert"].started_at,
        batch_id="00000000-0000-4000-8000-0000000000aa",
        position=0,
    )
    page = client_as("manager").get(f"/hosts/{objects['host'].name}/").content.decode()
    events = page[page.index('id="events"') :]
    assert "/runbooks/mps-server-crash/" in events
