"""What the web process says about itself: a strict Content-Security-Policy on every answer,
and no Server banner from gunicorn (checked against a real gunicorn)."""

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from django.conf import settings

pytestmark = pytest.mark.django_db


def test_every_answer_carries_the_policy(client_as):
    for path in ("/accounts/login/", "/healthz", "/api/hosts/", "/no-such-page/"):
        response = client_as("anonymous").get(path)
        assert response["Content-Security-Policy"] == settings.CONTENT_SECURITY_POLICY, path
    policy = settings.CONTENT_SECURITY_POLICY
    assert "script-src 'self';" in policy
    assert "style-src 'self' 'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=' " in policy
    assert "unsafe-inline" not in policy.replace("style-src-attr 'unsafe-inline'", "")
    assert "unsafe-eval" not in policy


def test_the_api_docs_page_runs_no_inline_script(client_as):
    page = client_as("oncall").get("/api/docs/").content.decode()
    assert "<script>" not in page
    assert "<style>" not in page
    script = client_as("oncall").get("/api/docs/?script=")
    assert script.status_code == 200
    assert "SwaggerUIBundle" in script.content.decode()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_gunicorn_answers_without_a_server_banner():
    port = _free_port()
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "console.wsgi", "-c", "python:console.gunicorn_conf",
         "-b", f"127.0.0.1:{port}", "--workers", "1"],
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        url = f"http://127.0.0.1:{port}/healthz"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    headers = answer.headers
                    break
            except OSError:
                assert time.monotonic() < deadline, "gunicorn did not answer within 60 s"
                time.sleep(0.2)
    finally:
        web.terminate()
        web.wait(timeout=30)
    assert "Server" not in headers
    assert headers["Content-Security-Policy"] == settings.CONTENT_SECURITY_POLICY
