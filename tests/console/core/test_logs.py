"""Log lines an operator can read: a refusal is one line (user, path, reason) and no traceback;
lines carry the change id; JSON lines on request."""

import io
import json
import logging

import pytest
from rest_framework.test import APIClient

from console.core.auditing.changes import open_change
from console.core.auditing.context import start_request
from console.core.logs import JsonLinesFormatter, RequestContextFilter
from tests.tokens import token_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def log():
    """What the console's one handler writes, as text."""
    (handler,) = [
        h for h in logging.getLogger().handlers if any(
            isinstance(f, RequestContextFilter) for f in h.filters
        )
    ]  # fmt: skip
    stream = io.StringIO()
    previous = handler.setStream(stream)
    yield stream
    handler.setStream(previous)


def request_lines(log) -> list[str]:
    """The lines about requests (logins log lines of their own)."""
    return [line for line in log.getvalue().splitlines() if " django.request " in line]


def api_as(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
    return client


def test_a_page_refused_by_a_permission_check_logs_one_line(client_as, log):
    assert client_as("outsider").get("/").status_code == 403
    (line,) = request_lines(log)
    assert "refused 403 GET / for outsider: Forbidden (Permission denied)" in line
    assert "Traceback" not in log.getvalue()


def test_an_api_refusal_logs_one_line_with_drf_s_reason(personas, log):
    assert api_as(personas["outsider"]).get("/api/hosts/").status_code == 403
    (line,) = request_lines(log)
    assert "refused 403 GET /api/hosts/ for outsider: Your role may not read this." in line


def test_bad_input_logs_one_line_naming_the_field(personas, log):
    response = api_as(personas["oncall"]).get("/api/hosts/", {"page_size": "many"})
    assert response.status_code == 400
    (line,) = request_lines(log)
    assert "refused 400 GET /api/hosts/ for oncall: page_size:" in line


def test_a_wrong_token_is_refused_without_the_token_in_the_log(log):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token secret-looking-value")
    assert client.get("/api/hosts/").status_code == 401
    (line,) = request_lines(log)
    assert "refused 401 GET /api/hosts/ for anonymous: Invalid token." in line
    assert "secret-looking-value" not in line


def test_lines_carry_the_change_id_of_the_request(personas, log):
    start_request()
    with open_change(personas["oncall"]) as change:
        logging.getLogger("console.test").warning("inside")
    logging.getLogger("console.test").warning("after, in the same request")
    inside, after = log.getvalue().splitlines()
    assert f"[{change.id.hex}] inside" in inside
    assert f"[{change.id.hex}] after" in after


def test_json_lines_hold_one_object_a_line_with_the_request_s_fields(client_as, log):
    handler = next(h for h in logging.getLogger().handlers if h.stream is log)
    previous, handler.formatter = handler.formatter, JsonLinesFormatter()
    try:
        client_as("outsider").get("/audit/")
    finally:
        handler.formatter = previous
    (record,) = [
        r for r in map(json.loads, log.getvalue().splitlines()) if r["logger"] == "django.request"
    ]
    assert record["level"] == "WARNING"
    assert record["logger"] == "django.request"
    assert record["user"] == "outsider"
    assert record["path"] == "/audit/"
    assert record["status"] == 403
    assert "traceback" not in record


def test_a_server_error_keeps_its_traceback_in_json():
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.getLogger("x").makeRecord(
            "x", logging.ERROR, __file__, 1, "failed", (), exc_info=__import__("sys").exc_info()
        )
    RequestContextFilter().filter(record)
    assert "RuntimeError: boom" in json.loads(JsonLinesFormatter().format(record))["traceback"]
