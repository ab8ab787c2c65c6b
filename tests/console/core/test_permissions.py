"""The permission matrix: every console view, for every persona.

A view added without a row here fails `test_every_view_is_in_the_matrix`.
"""

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.test import TestCase, override_settings
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from inventory.models import DeadLetter, Event, Host
from runbooks.services import do_create_note
from tests.conftest import PERSONAS as PERSONA_ROLES
from tests.console.alerts import support as alert_support
from tests.console.operations import support as operations_support
from tests.console.proposals import support as proposal_support
from tests.factories import DeploymentFactory, GpuFactory, UserFactory

PERSONAS = ("anonymous", "outsider", "oncall", "approver", "manager")
LOGIN = "login"  # shorthand: redirected to the login page


@dataclass(frozen=True)
class Row:
    name: str
    path: Callable[[dict], str]
    method: str
    expect: dict[str, int | str]
    data: Callable[[dict], dict] | None = None


def _everyone(code):
    return dict.fromkeys(PERSONAS, code)


def _readers(ok=200, outsider=403):
    return {"anonymous": LOGIN, "outsider": outsider, "oncall": ok, "approver": ok, "manager": ok}


def _editors(ok, outsider=403, manager=403):
    return {
        "anonymous": LOGIN,
        "outsider": outsider,
        "oncall": ok,
        "approver": ok,
        "manager": manager,
    }


def _note_form(objs):
    return {
        "title": "Drain before reload",
        "scope": "topic",
        "tags": "fragmentation",
        "body": "Drain first.",
        "summary": "matrix",
        "version": objs["note"].version,
    }


def _author_only(ok):
    """Proposals: the on-call author may; an approver who did not write it may not."""
    return {**_editors(ok, outsider=404), "approver": 403}


def _appliers(ok):
    return _editors(ok, outsider=404)


PROPOSAL_ROWS = [
    Row("proposal-list", lambda o: "/proposals/", "get", _readers()),
    Row(
        "proposal-inbox",
        lambda o: "/proposals/inbox/",
        "get",
        {**_editors(403), "approver": 200},
    ),
    Row("proposal-create", lambda o: "/proposals/new/", "get", _editors(200)),
    Row(
        "proposal-create",
        lambda o: "/proposals/new/",
        "post",
        _editors(302),
        lambda o: proposal_support.form_data(o["host"], o["model"]),
    ),
    Row(
        "proposal-detail",
        lambda o: f"/proposals/{o['ready'].pk}/",
        "get",
        _readers(outsider=404),
    ),
    Row(
        "proposal-edit",
        lambda o: f"/proposals/{o['draft'].pk}/edit/",
        "get",
        _author_only(200),
    ),
    Row(
        "proposal-edit",
        lambda o: f"/proposals/{o['draft'].pk}/edit/",
        "post",
        _author_only(302),
        lambda o: proposal_support.form_data(o["draft"]),
    ),
    Row(
        "proposal-submit",
        lambda o: f"/proposals/{o['draft'].pk}/submit/",
        "post",
        _author_only(302),
    ),
    Row(
        "proposal-decide",
        lambda o: f"/proposals/{o['ready'].pk}/decide/",
        "post",
        {**_appliers(403), "approver": 302},
        lambda o: {"decision": "approve"},
    ),
    Row(
        "proposal-load-test",
        lambda o: f"/proposals/{o['draft'].pk}/load-tests/",
        "post",
        _author_only(302),
        lambda o: proposal_support.load_test_upload(),
    ),
    Row(
        "proposal-load-test-start",
        lambda o: f"/proposals/{o['draft'].pk}/load-tests/run/",
        "post",
        _author_only(302),
        lambda o: {"ramp_s": 1, "hold_s": 5, "rate_scale": 1},
    ),
    Row(
        "proposal-load-test-result",
        lambda o: f"/proposals/{o['draft'].pk}/load-tests/{o['console_test'].pk}/",
        "get",
        _readers(outsider=404),
    ),
    Row(
        "proposal-load-test-status",
        lambda o: f"/proposals/{o['draft'].pk}/load-tests/{o['console_test'].pk}/status.json",
        "get",
        _readers(outsider=404),
    ),
    Row(
        "proposal-load-test-cancel",
        lambda o: f"/proposals/{o['draft'].pk}/load-tests/{o['console_test'].pk}/cancel/",
        "post",
        _author_only(302),
    ),
    Row(
        "proposal-apply",
        lambda o: f"/proposals/{o['approved'].pk}/apply/",
        "post",
        _appliers(302),
    ),
    Row(
        "proposal-verify",
        lambda o: f"/proposals/{o['applied'].pk}/verify/",
        "post",
        _appliers(302),
    ),
    Row(
        "proposal-roll-back",
        lambda o: f"/proposals/{o['applied'].pk}/roll-back/",
        "post",
        _appliers(302),
        lambda o: {"roll_back-comment": "matrix"},
    ),
    Row("api-proposals", lambda o: "/api/proposals/", "get", {**_readers(), "anonymous": 401}),
    Row(
        "api-proposals",
        lambda o: "/api/proposals/",
        "post",
        {**_editors(201), "anonymous": 401},
        lambda o: proposal_support.api_body(o["host"], o["model"]),
    ),
    Row(
        "api-proposal-detail",
        lambda o: f"/api/proposals/{o['ready'].pk}/",
        "get",
        {**_readers(), "anonymous": 401},
    ),
    Row(
        "proposal-preview",
        lambda o: "/proposals/new/preview/",
        "post",
        _editors(200),
        lambda o: proposal_support.form_data(o["host"], o["model"]),
    ),
    Row(
        "proposal-preview-edit",
        lambda o: f"/proposals/{o['draft'].pk}/edit/preview/",
        "post",
        _author_only(200),
        lambda o: proposal_support.form_data(o["draft"]),
    ),
    Row("proposal-host-search", lambda o: "/proposals/new/hosts/?q=a", "get", _editors(200)),
    Row(
        "proposal-status",
        lambda o: f"/proposals/{o['ready'].pk}/status/",
        "get",
        _readers(outsider=404),
    ),
    Row("profile", lambda o: "/accounts/profile/", "get", {**_everyone(200), "anonymous": LOGIN}),
    Row("proposal-export", lambda o: "/proposals/export.csv", "get", _readers()),
    Row(
        "profile",
        lambda o: "/accounts/profile/",
        "post",
        {**_everyone(302), "anonymous": LOGIN},
        lambda o: {"time_zone": "Europe/Berlin"},
    ),
    Row(
        "profile-browser-time-zone",
        lambda o: "/accounts/profile/time-zone/",
        "post",
        {**_everyone(200), "anonymous": LOGIN},
        lambda o: {"time_zone": "Asia/Tokyo"},
    ),
]


def _approvers_only(ok):
    """Alert rules: approvers edit them; on-call and managers read them."""
    return {**_editors(403, outsider=404), "approver": ok}


ALERT_ROWS = [
    Row("alert-list", lambda o: "/alerts/", "get", _readers()),
    Row("alert-detail", lambda o: f"/alerts/{o['alert'].pk}/", "get", _readers(outsider=404)),
    Row(
        "alert-acknowledge",
        lambda o: f"/alerts/{o['alert'].pk}/acknowledge/",
        "post",
        _editors(302, outsider=404),
        lambda o: {"comment": "on it"},
    ),
    Row("alert-silence-create", lambda o: "/alerts/silences/new/", "get", _editors(200)),
    Row(
        "alert-silence-create",
        lambda o: "/alerts/silences/new/",
        "post",
        _editors(302),
        lambda o: {"matchers": f"Hostname={o['host'].name}", "minutes": "30", "comment": "x"},
    ),
    Row(
        "alert-silence-end",
        lambda o: f"/alerts/silences/{o['silence'].pk}/end/",
        "post",
        _editors(302, outsider=404),
    ),
    Row("alert-rule-list", lambda o: "/alerts/rules/", "get", _readers()),
    Row(
        "alert-rule-edit",
        lambda o: f"/alerts/rules/{o['alert_rule'].slug}/edit/",
        "get",
        _approvers_only(200),
    ),
    Row(
        "alert-rule-edit",
        lambda o: f"/alerts/rules/{o['alert_rule'].slug}/edit/",
        "post",
        _approvers_only(302),
        alert_support.rule_form,
    ),
    Row(
        "api-alerts", lambda o: "/api/alerts/?state=firing", "get", {**_readers(), "anonymous": 401}
    ),
]


MATRIX = [
    Row("fleet", lambda o: "/", "get", _readers()),
    Row("host-detail", lambda o: f"/hosts/{o['host'].name}/", "get", _readers(outsider=404)),
    Row(
        "host-charts",
        lambda o: f"/hosts/{o['host'].name}/charts/?window=7d",
        "get",
        _readers(outsider=404),
    ),
    Row(
        "host-analysis",
        lambda o: f"/hosts/{o['host'].name}/analysis/",
        "get",
        _readers(outsider=404),
    ),
    Row(
        "api-host-ledger",
        lambda o: f"/api/hosts/{o['host'].name}/ledger/",
        "get",
        {**_readers(), "anonymous": 401},
    ),
    Row("metrics", lambda o: "/metrics", "get", {**_readers(), "anonymous": 401}),
    Row("model-list", lambda o: "/models/", "get", _readers()),
    Row("model-detail", lambda o: f"/models/{o['model'].pk}/", "get", _readers(outsider=404)),
    Row("oom-history", lambda o: "/oom/", "get", _readers()),
    Row("oom-export", lambda o: "/oom/export.csv", "get", _readers()),
    Row("audit-list", lambda o: "/audit/", "get", _readers()),
    Row("audit-export", lambda o: "/audit/export.csv", "get", _readers()),
    Row("fleet-export", lambda o: "/export.csv", "get", _readers()),
    Row("demo-history-progress", lambda o: "/demo/history-progress/", "get", _readers()),
    Row("event-export", lambda o: "/events/export.csv", "get", _readers()),
    Row("runbook-list", lambda o: "/runbooks/", "get", _readers()),
    Row("runbook-create", lambda o: "/runbooks/new/", "get", _editors(200)),
    Row("runbook-create", lambda o: "/runbooks/new/", "post", _editors(302), _note_form),
    Row("runbook-detail", lambda o: f"/runbooks/{o['note'].slug}/", "get", _readers(outsider=404)),
    Row(
        "runbook-edit",
        lambda o: f"/runbooks/{o['note'].slug}/edit/",
        "get",
        _editors(200, outsider=404),
    ),
    Row(
        "runbook-edit",
        lambda o: f"/runbooks/{o['note'].slug}/edit/",
        "post",
        _editors(302, outsider=404),
        _note_form,
    ),
    Row(
        "runbook-history",
        lambda o: f"/runbooks/{o['note'].slug}/history/",
        "get",
        _readers(outsider=404),
    ),
    Row(
        "runbook-revision",
        lambda o: f"/runbooks/{o['note'].slug}/history/1/",
        "get",
        _readers(outsider=404),
    ),
    Row(
        "event-acknowledge",
        lambda o: f"/events/{o['event'].pk}/acknowledge/",
        "post",
        _editors(302, outsider=404),
    ),
    Row("dead-letter-list", lambda o: "/ingest/dead-letters/", "get", _readers()),
    Row(
        "dead-letter-detail",
        lambda o: f"/ingest/dead-letters/{o['letter'].pk}/",
        "get",
        _readers(outsider=404),
    ),
    Row(
        "dead-letter-replay",
        lambda o: f"/ingest/dead-letters/{o['letter'].pk}/replay/",
        "post",
        _editors(302, outsider=404),
    ),
    Row(
        "dead-letter-discard",
        lambda o: f"/ingest/dead-letters/{o['letter'].pk}/discard/",
        "post",
        _editors(302, outsider=404),
    ),
    Row("api-hosts", lambda o: "/api/hosts/", "get", {**_readers(), "anonymous": 401}),
    Row("api-oom", lambda o: "/api/oom/", "get", {**_readers(), "anonymous": 401}),
    Row("api-audit", lambda o: "/api/audit/", "get", {**_readers(), "anonymous": 401}),
    Row(
        "api-host-actions", lambda o: "/api/host-actions/", "get", {**_readers(), "anonymous": 401}
    ),
    Row("api-runbooks", lambda o: "/api/runbooks/", "get", {**_readers(), "anonymous": 401}),
    Row(
        "api-host-samples",
        lambda o: f"/api/hosts/{o['host'].name}/samples/",
        "get",
        {**_readers(), "anonymous": 401},
    ),
    Row(
        "api-placement",
        lambda o: "/api/placement/",
        "post",
        {**_readers(ok=400), "anonymous": 401},
    ),
    Row(
        "api-schema",
        lambda o: "/api/schema/",
        "get",
        {**_readers(ok=200, outsider=200), "anonymous": 401},
    ),
    Row("api-docs", lambda o: "/api/docs/", "get", {**_readers(ok=200, outsider=200)}),
    Row("healthz", lambda o: "/healthz", "get", _everyone(200)),
    # The fixture's pending dead letter makes the console not ready; what matters here is
    # that nobody has to log in to be told so.
    Row("readyz", lambda o: "/readyz", "get", _everyone(503)),
    Row("login", lambda o: "/accounts/login/", "get", _everyone(200)),
    Row("logout", lambda o: "/accounts/logout/", "post", _everyone(302)),
    # The login page has the language switcher and the JavaScript catalogue too.
    Row(
        "set_language",
        lambda o: "/i18n/setlang/",
        "post",
        _everyone(302),
        data=lambda o: {"language": "zh-hans", "next": "/"},
    ),
    Row("javascript-catalog", lambda o: "/jsi18n/", "get", _everyone(200)),
    *PROPOSAL_ROWS,
    *ALERT_ROWS,
    *operations_support.rows(Row, _readers, _editors),
]


@pytest.fixture(scope="module")
def matrix(django_db_setup, django_db_blocker):
    """The personas and the objects every row reads, built once for the module inside a
    transaction rolled back after its last test; each test runs in a savepoint of its own,
    so what a row's request changes is gone before the next."""
    fast = override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"])
    with django_db_blocker.unblock(), fast:
        # setUpTestData's own transaction: do_* actions open durable blocks inside it.
        atomics = TestCase._enter_atomics()
        try:
            personas = {
                name: UserFactory(username=name, roles=roles)
                for name, roles in PERSONA_ROLES.items()
            }
            yield personas, _build_objects(personas)
        finally:
            TestCase._rollback_atomics(atomics)


@pytest.fixture
def objects(matrix, db):
    return matrix[1]


@pytest.fixture
def client_as(client, matrix, db):
    """client_as("manager"): the test client logged in as that persona ("anonymous": nobody)."""

    def login(persona: str):
        client.logout()
        if persona != "anonymous":
            client.force_login(matrix[0][persona])
        return client

    return login


def _build_objects(personas):
    gpu = GpuFactory()
    deployment = DeploymentFactory(host=gpu.host, gpus=[gpu])
    note = do_create_note(
        acting_user=personas["oncall"],
        title="Pinned host note",
        body="Card 3 runs hot.",
        scope="host",
        host=gpu.host,
        tags=[],
        served_model=None,
    )
    event = Event.objects.create(
        host=gpu.host,
        gpu=gpu,
        kind=Event.Kind.OOM,
        at=timezone.now(),
        batch_id="00000000-0000-4000-8000-000000000001",
        position=0,
    )
    letter = DeadLetter.objects.create(
        body=b'{"host": "nowhere"}', size=19, reason_code="unknown_host", reason="unknown host"
    )
    return {
        "host": gpu.host,
        "model": deployment.served_model,
        "note": note,
        "event": event,
        "letter": letter,
        **proposal_support.matrix_objects(personas, gpu.host),
        **alert_support.matrix_objects(gpu.host),
        **operations_support.matrix_objects(personas, gpu.host, deployment, gpu),
    }


@pytest.mark.django_db
@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("row", MATRIX, ids=lambda row: f"{row.method}-{row.name}")
def test_permission_matrix(client_as, objects, persona, row):
    client = client_as(persona)
    path = row.path(objects)
    data = row.data(objects) if row.data else None
    response = (
        getattr(client, row.method)(path, data) if data else getattr(client, row.method)(path)
    )
    expected = row.expect[persona]
    if expected == LOGIN:
        assert response.status_code == 302, response
        assert response["Location"].startswith("/accounts/login/")
    else:
        assert response.status_code == expected, (persona, path, response.status_code)


def _named_patterns(resolver, prefix=""):
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            if getattr(pattern, "app_name", None) == "admin":
                continue
            yield from _named_patterns(pattern, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield pattern.name


def test_every_view_is_in_the_matrix():
    covered = {row.name for row in MATRIX}
    missing = set(_named_patterns(get_resolver())) - covered
    assert not missing, f"views without a permission-matrix row: {sorted(missing)}"


@pytest.mark.django_db
def test_outsider_is_told_they_have_no_role(client_as, objects):
    response = client_as("outsider").get("/")
    assert response.status_code == 403
    assert b"no console role" in response.content


@pytest.mark.django_db
def test_manager_reads_but_the_edit_page_says_why_not(client_as, objects):
    response = client_as("manager").get(f"/runbooks/{objects['note'].slug}/edit/")
    assert response.status_code == 403
    assert b"may not change runbook notes" in response.content
    assert Host.objects.count() == 1
