import pytest

pytestmark = pytest.mark.django_db


def test_healthz_needs_no_login(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.content == b"ok\n"


def test_readyz_reports_database_and_broker(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "database": "ok",
        "broker": "ok",
        "status": "ready",
        "collectors": {},
    }


def test_readyz_details_each_collectors_health(client):
    from django.utils import timezone

    from inventory.models import CollectorStatus
    from tests.factories import HostFactory

    fresh = HostFactory(name="fresh")
    HostFactory(name="silent")
    CollectorStatus.objects.create(
        host=fresh, last_sample_at=timezone.now(), outbox_depth=2, missing_batches=1
    )
    collectors = client.get("/readyz").json()["collectors"]
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


def test_readyz_is_503_with_the_reason_when_the_broker_is_down(client, settings):
    settings.READYZ_BROKER_TIMEOUT_S = 0.5
    # A port nothing listens on: the check must fail fast and say why.
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["database"] == "ok"
    assert body["status"] == "not ready"
    assert "Error" in body["broker"] or "refused" in body["broker"].lower()


def test_every_other_page_needs_login(client):
    response = client.get("/runbooks/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/runbooks/"
