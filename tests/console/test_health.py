import datetime as dt

import pytest
from django.utils import timezone

from console import health
from inventory.models import CollectorStatus, DeadLetter
from tests.factories import HostFactory
from tests.tokens import token_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def long_running(monkeypatch):
    """The console has been up for a day: ingest has had its time to catch up."""
    monkeypatch.setattr(health, "PROCESS_STARTED", health.time.monotonic() - 86400)


def _dead_letter(*, age_s=0.0, status=DeadLetter.Status.PENDING):
    letter = DeadLetter.objects.create(
        body=b"{}", size=2, reason_code="schema", reason="seq: must be at least 0", status=status
    )
    DeadLetter.objects.filter(pk=letter.pk).update(
        received_at=timezone.now() - dt.timedelta(seconds=age_s)
    )
    return letter


def _batch_written(host, *, age_s):
    CollectorStatus.objects.update_or_create(
        host=host, defaults={"last_batch_at": timezone.now() - dt.timedelta(seconds=age_s)}
    )


def test_healthz_needs_no_login(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.content == b"ok\n"


def test_readyz_tells_anyone_only_that_it_is_ready(client, long_running):
    _batch_written(HostFactory(name="fresh"), age_s=5)
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready"}


@pytest.mark.parametrize("check", ["database", "broker", "ingest_lag", "dead_letters"])
def test_readyz_tells_anyone_which_check_failed_in_one_word(client, monkeypatch, check):
    monkeypatch.setattr(
        health, f"_check_{check}", lambda: "OperationalError: /var/run/postgresql/.s.PGSQL.5432"
    )
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "not ready", "reason": check}


def test_readyz_with_the_database_down_gives_no_details_even_to_a_logged_in_user(
    client_as, monkeypatch
):
    client = client_as("oncall")
    monkeypatch.setattr(health, "_check_database", lambda: "OperationalError: socket /run/pg")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "not ready", "reason": "database"}


def test_readyz_is_not_ready_when_no_host_has_had_a_batch_written_for_too_long(
    client, settings, long_running
):
    settings.READYZ_MAX_INGEST_LAG_S = 300
    _batch_written(HostFactory(), age_s=400)
    _batch_written(HostFactory(), age_s=301)
    HostFactory(collector="none")
    assert client.get("/readyz").json() == {"status": "not ready", "reason": "ingest_lag"}

    # One host still being written means ingest keeps up; the quiet ones show as stale.
    _batch_written(HostFactory(), age_s=10)
    assert client.get("/readyz").json() == {"status": "ready"}


def test_ingest_lag_waits_until_the_console_has_been_up_that_long(client, settings, monkeypatch):
    settings.READYZ_MAX_INGEST_LAG_S = 300
    _batch_written(HostFactory(), age_s=3600)
    monkeypatch.setattr(health, "PROCESS_STARTED", health.time.monotonic() - 60)
    assert client.get("/readyz").status_code == 200
    monkeypatch.setattr(health, "PROCESS_STARTED", health.time.monotonic() - 301)
    assert client.get("/readyz").json()["reason"] == "ingest_lag"


def test_a_fleet_that_never_sent_a_batch_has_no_ingest_lag(client, long_running):
    HostFactory()
    assert client.get("/readyz").status_code == 200


def test_readyz_is_not_ready_while_fresh_dead_letters_wait(client, settings, long_running):
    settings.READYZ_MAX_DEAD_LETTERS = 1
    settings.READYZ_DEAD_LETTER_WINDOW_S = 900
    _dead_letter(age_s=10)
    _dead_letter(age_s=1000)  # older than the window: listed on its page, not a readiness gate
    _dead_letter(status=DeadLetter.Status.DISCARDED)
    assert client.get("/readyz").status_code == 200

    letter = _dead_letter(age_s=20)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "not ready", "reason": "dead_letters"}

    DeadLetter.objects.filter(pk=letter.pk).update(status=DeadLetter.Status.REPLAYED)
    assert client.get("/readyz").status_code == 200


def test_by_default_one_fresh_dead_letter_makes_it_not_ready(client, long_running):
    _dead_letter(age_s=60)
    assert client.get("/readyz").json() == {"status": "not ready", "reason": "dead_letters"}


def test_readyz_details_each_check_and_collector_to_a_user_who_may_see_hosts(
    client_as, long_running
):
    fresh = HostFactory(name="fresh")
    HostFactory(name="silent")
    CollectorStatus.objects.create(
        host=fresh,
        last_sample_at=timezone.now(),
        last_batch_at=timezone.now(),
        outbox_depth=2,
        missing_batches=1,
    )
    _dead_letter(age_s=5)
    response = client_as("manager").get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["database"] == "ok"
    assert body["broker"] == "ok"
    assert body["ingest_lag"] == "ok"
    assert body["dead_letters"] == "dead letters waiting from the last 900 s: 1 (limit 0)"
    assert body["status"] == "not ready"
    collectors = body["collectors"]
    assert collectors["fresh"]["stale"] is False
    assert collectors["fresh"]["outbox_depth"] == 2
    assert collectors["fresh"]["missing_batches"] == 1
    assert collectors["silent"] == {
        "last_sample_age_s": None,
        "stale": True,
        "missing_batches": 0,
        "faults_last_batch": 0,
        "outbox_depth": 0,
    }


def test_readyz_details_need_a_role_that_may_see_hosts(client_as, long_running):
    HostFactory(name="secret-host")
    for persona in ("anonymous", "outsider"):
        assert client_as(persona).get("/readyz").json() == {"status": "ready"}
    assert "secret-host" in client_as("oncall").get("/readyz").json()["collectors"]


def test_readyz_details_for_an_api_token(client, personas, long_running):
    token = token_for(personas["oncall"])
    response = client.get("/readyz", HTTP_AUTHORIZATION=f"Token {token}")
    assert response.json()["database"] == "ok"
    assert client.get("/readyz", HTTP_AUTHORIZATION="Token wrong").status_code == 401


def test_readyz_is_503_with_the_reason_when_the_broker_is_down(client_as, settings):
    settings.READYZ_BROKER_TIMEOUT_S = 0.5
    # A port nothing listens on: the check must fail fast and say why.
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    response = client_as("oncall").get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["database"] == "ok"
    assert body["status"] == "not ready"
    assert "Error" in body["broker"] or "refused" in body["broker"].lower()
    anonymous = client_as("anonymous").get("/readyz")
    assert anonymous.json() == {"status": "not ready", "reason": "broker"}


def test_every_other_page_needs_login(client):
    response = client.get("/runbooks/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/runbooks/"
