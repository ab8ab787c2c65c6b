"""Health checks for load balancers and process supervisors; the only pages without login."""

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from kombu import Connection


@login_not_required
@never_cache
def healthz(request):
    return HttpResponse("ok\n", content_type="text/plain")


def _check_database() -> str | None:
    try:
        connection.ensure_connection()
    except Exception as exc:  # any failure means not ready; the reason goes in the answer
        return f"{type(exc).__name__}: {exc}".strip()
    # An open connection can have died since: the backend's own liveness probe asks the server.
    return None if connection.is_usable() else "the database connection is not usable"


def _check_broker() -> str | None:
    try:
        with Connection(
            settings.CELERY_BROKER_URL,
            transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS,
            connect_timeout=settings.READYZ_BROKER_TIMEOUT_S,
        ) as conn:
            conn.ensure_connection(max_retries=1, timeout=settings.READYZ_BROKER_TIMEOUT_S)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return None


def _collectors() -> dict:
    """Each collected host's collector health: detail for operators, not a readiness gate."""
    from inventory.models import Host
    from inventory.reports.collector import collector_health

    now = timezone.now()
    hosts = Host.objects.exclude(collector=Host.Collector.NONE).select_related("collector_status")
    detail = {}
    for host in hosts:
        health = collector_health(getattr(host, "collector_status", None), now)
        detail[host.name] = {
            "last_sample_age_s": None if health["age_s"] is None else round(health["age_s"], 1),
            "stale": health["stale"],
            "missing_batches": health["missing_batches"],
            "faults_last_batch": health["faults_last_batch"],
            "outbox_depth": health["outbox_depth"],
        }
    return detail


@login_not_required
@never_cache
def readyz(request):
    checks = {"database": _check_database(), "broker": _check_broker()}
    body = {name: ("ok" if error is None else error) for name, error in checks.items()}
    ready = all(error is None for error in checks.values())
    body["status"] = "ready" if ready else "not ready"
    if checks["database"] is None:
        body["collectors"] = _collectors()
    return JsonResponse(body, status=200 if ready else 503)
