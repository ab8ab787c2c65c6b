"""Health checks, the only pages without login.

/healthz says the process answers (for a load balancer). /readyz says whether the console is
doing its job: database and broker reachable, ingest keeping up, no fresh dead letters. To
anyone it says only that, and which check failed first, in one word; error texts and each
collector's health go only to a user who may see the hosts, since they name hosts and paths.
"""

import datetime as dt
import time

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.db.models import Max
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from drf_spectacular.utils import extend_schema
from kombu import Connection
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from console.core.access import permission_name
from inventory.models import DeadLetter, Host
from inventory.reports.collector import collector_health

# A console that has just started has not had the time to catch up on ingest.
PROCESS_STARTED = time.monotonic()


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


def _check_ingest_lag() -> str | None:
    """Not ready when no collected host's batch has been written for too long.

    One host going quiet is that host's problem (its collector shows stale); all of them
    quiet means ingest is stuck or every agent is gone. A fleet that has never sent a batch
    has nothing to lag behind; a console just started gets the same time to catch up.
    """

    limit = settings.READYZ_MAX_INGEST_LAG_S
    if time.monotonic() - PROCESS_STARTED < limit:
        return None
    newest = (
        Host.objects.exclude(collector=Host.Collector.NONE)
        .aggregate(newest=Max("collector_status__last_batch_at"))
        .get("newest")
    )
    if newest is None:
        return None
    lag = (timezone.now() - newest).total_seconds()
    if lag <= limit:
        return None
    return f"no batch written for {lag:.0f} s (limit {limit:.0f} s)"


def _check_dead_letters() -> str | None:

    window = settings.READYZ_DEAD_LETTER_WINDOW_S
    fresh = DeadLetter.objects.filter(
        status=DeadLetter.Status.PENDING,
        received_at__gte=timezone.now() - dt.timedelta(seconds=window),
    ).count()
    if fresh <= settings.READYZ_MAX_DEAD_LETTERS:
        return None
    return (
        f"dead letters waiting from the last {window:.0f} s: {fresh} "
        f"(limit {settings.READYZ_MAX_DEAD_LETTERS})"
    )


def _collectors(user) -> dict:
    """Each collected host's collector health: detail for operators, not a readiness gate."""

    now = timezone.now()
    hosts = (
        Host.objects.visible_to(user)
        .exclude(collector=Host.Collector.NONE)
        .select_related("collector_status")
    )
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


def _run_checks() -> dict[str, str | None]:
    """Each check's error (None: fine), in order; those that need the database only with it."""
    checks = {"database": _check_database(), "broker": _check_broker()}
    if checks["database"] is None:
        checks["ingest_lag"] = _check_ingest_lag()
        checks["dead_letters"] = _check_dead_letters()
    return checks


def _may_see_details(request, database_up: bool) -> bool:
    # Who asks is known from the database: with it down, everyone gets the short answer.
    if not database_up:
        return False

    user = request.user  # session or API token; a wrong token answers 401 here
    return user.is_authenticated and user.has_perm(permission_name(Host, "view"))


@extend_schema(exclude=True)
class Readyz(APIView):
    permission_classes = []
    renderer_classes = [JSONRenderer]
    http_method_names = ["get", "head"]

    def perform_authentication(self, request):
        """Left to `get`: finding the user needs the database, which may be the thing down."""

    def get(self, request):
        checks = _run_checks()
        failed = [name for name, error in checks.items() if error is not None]
        status = 503 if failed else 200
        if not _may_see_details(request, checks["database"] is None):
            body = {"status": "not ready", "reason": failed[0]} if failed else {"status": "ready"}
            return JsonResponse(body, status=status)
        body = {name: ("ok" if error is None else error) for name, error in checks.items()}
        body["status"] = "not ready" if failed else "ready"
        body["collectors"] = _collectors(request.user)
        return JsonResponse(body, status=status)


readyz = never_cache(Readyz.as_view())
