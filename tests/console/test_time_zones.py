"""Each user's time zone: taken from the browser once, chosen on the profile page, and every
time on a page shown in it with the zone named."""

import datetime as dt

import pytest

from console.audit import Action
from console.models import AuditEntry, Preference
from console.operations.models import DefragPlan
from console.proposals.models import LoadTest
from tests.factories import GpuFactory
from tests.proposals.support import create_proposal, ready_proposal

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
