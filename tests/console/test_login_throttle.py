"""Login throttling: wrong passwords for one username from one address lock that pair out."""

import datetime as dt
import logging

import pytest
from axes.models import AccessAttempt
from django.core.management import call_command

from console.login_throttle import client_ip
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"
LOGIN = "/accounts/login/"


@pytest.fixture
def user():
    return UserFactory(username="alice", roles=["oncall"])


def _log_in(client, password, *, address="10.0.0.1", username="alice"):
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address)


def _lock_out(client, settings, **where):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = _log_in(client, "wrong", **where)
        assert response.status_code == 200
        assert b"did not match" in response.content
    return _log_in(client, "wrong", **where)


def _logged_in(client):
    return "_auth_user_id" in client.session


def test_the_limit_th_wrong_password_locks_the_pair_out(client, settings, user, caplog):
    settings.AXES_FAILURE_LIMIT = 5
    settings.AXES_COOLOFF_TIME = 15 / 60
    with caplog.at_level(logging.WARNING, logger="axes"):
        response = _lock_out(client, settings)
    assert response.status_code == 429
    assert b"Too many attempts" in response.content
    assert b"5 wrong passwords" in response.content
    assert b"paused for 15 minutes" in response.content
    assert "Locking out" in caplog.text and "alice" in caplog.text

    refused = _log_in(client, PASSWORD)
    assert refused.status_code == 429
    assert not _logged_in(client)


def test_a_lockout_does_not_reach_other_addresses(client, settings, user):
    _lock_out(client, settings, address="10.0.0.66")
    response = _log_in(client, PASSWORD, address="10.0.0.1")
    assert response.status_code == 302
    assert _logged_in(client)


def test_after_the_cool_off_the_right_password_works(client, settings, user):
    _lock_out(client, settings)
    AccessAttempt.objects.update(
        attempt_time=AccessAttempt.objects.get().attempt_time
        - dt.timedelta(hours=settings.AXES_COOLOFF_TIME, minutes=1)
    )
    assert _log_in(client, PASSWORD).status_code == 302
    assert _logged_in(client)


def test_axes_reset_lifts_a_lockout(client, settings, user):
    _lock_out(client, settings)
    assert _log_in(client, PASSWORD).status_code == 429
    call_command("axes_reset_username", "alice")
    assert _log_in(client, PASSWORD).status_code == 302


def test_a_good_login_clears_the_count(client, settings, user):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _log_in(client, "wrong")
    assert _log_in(client, PASSWORD).status_code == 302
    client.logout()
    assert _log_in(client, "wrong").status_code == 200


def test_the_admin_login_is_throttled_too(client, settings, user):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        response = client.post(
            "/admin/login/", {"username": "alice", "password": "wrong"}, REMOTE_ADDR="10.0.0.1"
        )
    assert response.status_code == 429


def test_behind_a_proxy_only_the_address_it_appended_counts(rf, settings):
    request = rf.get("/", REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR="1.2.3.4, 203.0.113.7")
    settings.BEHIND_PROXY = False
    assert client_ip(request) == "10.9.9.9"
    settings.BEHIND_PROXY = True
    assert client_ip(request) == "203.0.113.7"
    assert client_ip(rf.get("/", REMOTE_ADDR="10.9.9.9")) == "10.9.9.9"
