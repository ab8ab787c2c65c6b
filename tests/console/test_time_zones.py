"""Each user's time zone: taken from the browser once, chosen on the profile page, and every
time on a page shown in it with the zone named."""

import datetime as dt

import pytest

from console.audit import Action
from console.models import AuditEntry, Preference
from tests.proposals.support import create_proposal

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
