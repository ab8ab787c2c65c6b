"""Each user's time zone: taken from the browser once, chosen on the profile page, and every
time on a page shown in it with the zone named."""

import datetime as dt
import uuid
import zoneinfo

import pytest
from django.template.loader import render_to_string
from django.utils import timezone

from console.alerts.models import Alert, Silence
from console.core.auditing import Action
from console.core.models import AuditEntry, Preference
from console.operations.models import (
    DefragPlan,
    DefragReload,
    DegradationRun,
    HostAction,
    MpsRecovery,
    StandingPolicy,
)
from console.proposals.models import LoadTest
from inventory.models import CardRefusal, Event
from tests.console.alerts.support import matrix_objects
from tests.console.proposals.support import create_proposal, ready_proposal
from tests.factories import DeploymentFactory, GpuFactory

pytestmark = pytest.mark.django_db


def test_the_browser_zone_is_taken_once_and_never_over_a_choice(client_as, personas):
    client = client_as("oncall")
    first = client.post("/accounts/profile/time-zone/", {"time_zone": "Asia/Tokyo"})
    assert first.json() == {"time_zone": "Asia/Tokyo", "changed": True}
    again = client.post("/accounts/profile/time-zone/", {"time_zone": "Europe/Paris"})
    assert again.json()["changed"] is False
    assert Preference.objects.get(user=personas["oncall"]).time_zone == "Asia/Tokyo"

    client.post("/accounts/profile/", {"time_zone": "America/New_York"})
    preference = Preference.objects.get(user=personas["oncall"])
    assert (preference.time_zone, preference.time_zone_source) == ("America/New_York", "chosen")
    assert AuditEntry.objects.filter(action=Action.PREFERENCE_TIME_ZONE).count() == 2


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "../../etc/passwd", "x" * 500])
def test_a_zone_that_does_not_exist_is_refused_with_its_reason(client_as, zone):
    response = client_as("oncall").post("/accounts/profile/time-zone/", {"time_zone": zone})
    assert response.status_code == 400
    assert "Not an IANA time zone" in response.json()["error"]
    assert not Preference.objects.exists()


def test_times_on_a_page_show_in_the_users_zone_with_its_name(client_as, personas):
    proposal = create_proposal(personas["oncall"])
    at = dt.datetime(2026, 7, 1, 12, 0, tzinfo=dt.UTC)
    type(proposal).objects.filter(pk=proposal.pk).update(updated_at=at)
    client = client_as("oncall")
    assert "2026-07-01 12:00 UTC" in client.get(f"/proposals/{proposal.pk}/").content.decode()
    client.post("/accounts/profile/", {"time_zone": "Europe/Berlin"})
    page = client.get(f"/proposals/{proposal.pk}/").content.decode()
    assert "2026-07-01 14:00 CEST" in page
    assert "Europe/Berlin" in page  # named in the header too


def _in_berlin(client_as, personas, persona: str):
    Preference.objects.create(user=personas[persona], time_zone="Europe/Berlin",
                              time_zone_source="chosen")  # fmt: skip
    return client_as(persona)


def test_a_load_tests_window_is_named_in_the_readers_zone(client_as, personas):
    proposal = ready_proposal(personas["oncall"])
    start = dt.datetime(2026, 3, 1, 3, 10, 5, tzinfo=dt.UTC)
    test = LoadTest.objects.create(
        proposal=proposal, uploaded_by=personas["oncall"], source_format=LoadTest.Format.MEASURED,
        files=["combined test"], status=LoadTest.Status.DONE, window_start=start,
        window_end=start + dt.timedelta(minutes=3),
        result={"models": [], "series": {}, "cards": []},
    )  # fmt: skip
    client = _in_berlin(client_as, personas, "manager")
    page = client.get(f"/proposals/{proposal.pk}/load-tests/{test.pk}/").content.decode()
    head = page.split('<div class="muted"><span id="load-test-state">', 1)[1].split("</div>", 1)[0]
    # 03:10:05 to 03:13:05 UTC is 04:10:05 to 04:13:05 in Berlin in March, and says so.
    assert ">2026-03-01 04:10:05</time> – " in head
    assert ">04:13:05 CET</time>" in head
    assert "UTC" not in head


def test_a_load_tests_first_bound_is_named_in_the_readers_zone(client_as, personas):
    proposal = ready_proposal(personas["oncall"])
    bound = {"kind": "memory", "card": "card 0", "peak_bytes": 2, "bound_bytes": 1,
             "at": "2026-03-01T03:11:00+00:00", "phase": "hold", "t_s": 55.0,
             "load_rps": {"llama": 4.0}}  # fmt: skip
    test = LoadTest.objects.create(
        proposal=proposal, uploaded_by=personas["oncall"], source_format=LoadTest.Format.MEASURED,
        files=["combined test"], status=LoadTest.Status.DONE,
        result={"models": [], "series": {}, "cards": [], "first_bound": bound},
    )  # fmt: skip
    client = _in_berlin(client_as, personas, "manager")
    page = client.get(f"/proposals/{proposal.pk}/load-tests/{test.pk}/").content.decode()
    first = page.split('id="first-bound"', 1)[1].split("</section>", 1)[0]
    # Stored as an ISO string in UTC; shown at 04:11 in Berlin in March, and says so.
    assert '<time datetime="2026-03-01T04:11:00+01:00">2026-03-01 04:11:00 CET</time>' in first
    assert "03:11" not in first


def test_an_off_peak_plans_window_is_named_in_the_readers_zone(client_as, personas):
    host = GpuFactory().host
    start = dt.datetime(2026, 7, 1, 1, 0, tzinfo=dt.UTC)
    DefragPlan.objects.create(
        host=host, window_start=start, window_end=start + dt.timedelta(hours=2)
    )
    client = _in_berlin(client_as, personas, "manager")
    page = client.get(f"/hosts/{host.name}/operations/").content.decode()
    heading = page.split('<h2 id="off-peak">', 1)[1].split("<h3>", 1)[1].split("</h3>", 1)[0]
    # 01:00 to 03:00 UTC is 03:00 to 05:00 in Berlin in summer, and says so.
    assert heading.startswith("Wed 2026-07-01 03:00 – 05:00 CEST · ")
    assert "UTC" not in heading


def _in_shanghai(client_as, personas, persona: str):
    Preference.objects.create(user=personas[persona], time_zone="Asia/Shanghai",
                              time_zone_source="chosen")  # fmt: skip
    return client_as(persona)


def _cell(page: str, table_id: str) -> str:
    return page.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]


def test_every_time_on_a_hosts_operations_page_is_named_in_the_readers_zone(client_as, personas):
    gpu = GpuFactory()
    host = gpu.host
    at = dt.datetime(2026, 7, 1, 1, 2, 3, tzinfo=dt.UTC)  # 09:02:03 in Shanghai (UTC+8)
    approver = personas["approver"]
    action = HostAction.objects.create(host=host, action="mps_restart", state="succeeded",
                                       params={"card_index": 0}, sent_at=at)  # fmt: skip
    HostAction.objects.filter(pk=action.pk).update(created_at=at)
    policy = StandingPolicy.objects.create(host=host, kind="mps_restart", signed_by=approver,
                                           revoked_by=approver, revoked_at=at)  # fmt: skip
    StandingPolicy.objects.filter(pk=policy.pk).update(signed_at=at)
    refusal = CardRefusal.objects.create(gpu=gpu, reason_code="degradation", cleared_at=at,
                                         cleared_by=approver)  # fmt: skip
    CardRefusal.objects.filter(pk=refusal.pk).update(set_at=at)
    run = DegradationRun.objects.create(host=host, gpu=gpu, trigger="usage", total_bytes=1,
                                        used_before_bytes=1, limit_fraction=0.9,
                                        projected_after_bytes=1, state="recovered")  # fmt: skip
    DegradationRun.objects.filter(pk=run.pk).update(started_at=at)
    crash = Event.objects.create(host=host, gpu=gpu, kind=Event.Kind.MPS_SERVER_DOWN, at=at,
                                 batch_id=uuid.uuid4(), position=0)  # fmt: skip
    recovery = MpsRecovery.objects.create(
        host=host, gpu=gpu, event=crash, crashed_at=at, state="recovered",
        clients={"llama": {"pid": 10, "returned_pid": 11,
                           "returned_at": (at + dt.timedelta(minutes=1)).isoformat()}},
    )  # fmt: skip
    recovery.actions.add(action)
    deployment = DeploymentFactory(host=host, gpus=[gpu])
    plan = DefragPlan.objects.create(host=host, window_start=at, window_end=at)
    DefragReload.objects.create(
        plan=plan, deployment=deployment, gpu=gpu, order=1, not_before=at,
        reason="fragmentation", estimated_bytes=1,
    )  # fmt: skip

    client = _in_shanghai(client_as, personas, "approver")
    page = client.get(f"/hosts/{host.name}/operations/").content.decode()
    named = "2026-07-01 09:02:03 CST"
    assert named in _cell(page, "host-actions")
    policies = _cell(page, "standing-policies")
    assert policies.count("2026-07-01 09:02 CST") == 2  # signed and revoked
    assert _cell(page, "card-refusals").count("2026-07-01 09:02 CST") == 2  # set and cleared
    assert named in _cell(page, "degradations")
    recoveries = _cell(page, "mps-recoveries")
    assert named in recoveries  # the crash
    assert ">09:02:03 CST</time> Succeeded" in recoveries  # the restart sent
    # The client's return, stored as an ISO string in a JSON field, is converted too.
    assert '<time datetime="2026-07-01T09:03:03+08:00">09:03:03 CST</time>' in recoveries
    reloads = page.split('id="off-peak"', 1)[1]
    assert ">09:02 CST</time></td>" in reloads  # the reload's not-before
    for table in ("host-actions", "standing-policies", "card-refusals", "degradations",
                  "mps-recoveries"):  # fmt: skip
        assert "UTC" not in _cell(page, table)


def test_an_alerts_times_are_named_in_the_readers_zone(client_as, personas):
    gpu = GpuFactory(index=0)
    objects = matrix_objects(gpu.host)
    at = dt.datetime(2026, 7, 1, 1, 2, 3, tzinfo=dt.UTC)  # 09:02:03 in Shanghai (UTC+8)
    Alert.objects.filter(pk=objects["alert"].pk).update(
        started_at=at, firing_at=at, acknowledged_at=at, acknowledged_by=personas["oncall"]
    )
    ends = dt.datetime(2099, 1, 1, 1, 0, tzinfo=dt.UTC)
    Silence.objects.filter(pk=objects["silence"].pk).update(ends_at=ends)
    client = _in_shanghai(client_as, personas, "oncall")
    detail = client.get(f"/alerts/{objects['alert'].pk}/").content.decode()
    assert detail.count(">2026-07-01 09:02:03 CST</time>") == 2  # started, firing since
    assert ">2026-07-01 09:02 CST</time>" in detail  # acknowledged
    listing = client.get("/alerts/").content.decode()
    assert ">2026-07-01 09:02:03 CST</time>" in listing
    assert ">2099-01-01 09:00 CST</time>" in listing  # the silence's end


def test_an_mps_acknowledgement_on_the_isolation_gate_is_named_in_the_readers_zone():
    result = {
        "gate": "isolation", "status": "pass", "title": "Isolation", "runbook_slug": "mps",
        "checked_at": dt.datetime(2026, 7, 1, 1, 5, tzinfo=dt.UTC), "evidence": {},
        "summary": "", "summary_reason": None, "reasons": [],
        "numbers": {"mode": "mps", "cotenants": [], "acknowledged_by": "oncall",
                    "acknowledged_at": "2026-07-01T01:02+00:00"},  # as the gate stores it
    }  # fmt: skip
    with timezone.override(zoneinfo.ZoneInfo("Asia/Shanghai")):
        html = render_to_string("proposals/_gate.html", {"result": result})
    assert "oncall at 2026-07-01 09:02 CST" in html


def test_a_moment_inside_a_gate_reason_is_shown_in_the_readers_zone_and_named():
    from console.core.reason_text import render_here
    from inventory.analytics.reasons import Reason

    detail = Reason("gate.load_test.memory_over", {"peak": 80 * 2**30, "bound": 79 * 2**30})
    first = Reason(
        "gate.load_test.detail_at", {"detail": detail, "at": "2026-07-01T01:02:03+00:00"}
    )
    run = Reason(
        "gate.load_test.run_by",
        {"user": "oncall", "at": "2026-07-01T01:00:00+00:00", "files": ["a.json"]},
    )
    with timezone.override(zoneinfo.ZoneInfo("Europe/Berlin")):
        assert "at 2026-07-01 03:02:03 CEST" in render_here(first)
        assert "run by oncall at 2026-07-01 03:00:00 CEST" in render_here(run)
    with timezone.override(zoneinfo.ZoneInfo("Asia/Shanghai")):
        assert "at 2026-07-01 09:02:03 CST" in render_here(first)
    # A label stored before moments kept their offset (server time, UTC) still reads.
    old = Reason("gate.load_test.run_by", {"user": "oncall", "at": "2026-07-01 01:00", "files": []})
    with timezone.override(zoneinfo.ZoneInfo("Asia/Shanghai")):
        assert "at 2026-07-01 09:00:00 CST" in render_here(old)


def test_a_stored_time_that_is_no_iso_moment_shows_as_stored_not_as_a_server_error():
    from console.core.templatetags.console_format import iso_datetime

    assert iso_datetime("18:49:09") is None and iso_datetime(None) is None
    result = {
        "gate": "isolation", "status": "pass", "title": "Isolation", "runbook_slug": "mps",
        "checked_at": dt.datetime(2026, 7, 1, 1, 5, tzinfo=dt.UTC), "evidence": {},
        "summary": "", "summary_reason": None, "reasons": [],
        "numbers": {"mode": "mps", "cotenants": [], "acknowledged_by": "oncall",
                    "acknowledged_at": "yesterday"},
    }  # fmt: skip
    assert "oncall at yesterday" in render_to_string("proposals/_gate.html", {"result": result})
