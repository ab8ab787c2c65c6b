"""Health checks for load balancers and process supervisors; the only pages without login."""

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache

from console.celery import app as celery_app


@login_not_required
@never_cache
def healthz(request):
    return HttpResponse("ok\n", content_type="text/plain")


def _check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any failure means not ready; the reason goes in the answer
        return f"{type(exc).__name__}: {exc}".strip()
    return None


def _check_broker() -> str | None:
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=settings.READYZ_BROKER_TIMEOUT_S)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return None


@login_not_required
@never_cache
def readyz(request):
    checks = {"database": _check_database(), "broker": _check_broker()}
    body = {name: ("ok" if error is None else error) for name, error in checks.items()}
    ready = all(error is None for error in checks.values())
    body["status"] = "ready" if ready else "not ready"
    return JsonResponse(body, status=200 if ready else 503)
