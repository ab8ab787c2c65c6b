"""`manage.py check --deploy` behind HTTPS, configured through the environment alone."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]

BEHIND_HTTPS = {
    "DEBUG": "false",
    "SECURE_COOKIES": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
    "SECURE_SSL_REDIRECT": "true",
    "BEHIND_PROXY": "true",
    "ALLOWED_HOSTS": "console.example.org",
}


def _check_deploy(**env: str) -> subprocess.CompletedProcess:
    # The browser tests' conftest sets DJANGO_ALLOW_ASYNC_UNSAFE for this process; a deployment
    # has no such thing.
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in {"SECRET_KEY_FILE", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    }
    environment |= {"SECRET_KEY": secrets.token_urlsafe(64), **env}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        capture_output=True,
        text=True,
        env=environment,
        cwd=REPOSITORY,
        timeout=120,
    )


def test_check_deploy_is_clean_behind_https():
    result = _check_deploy(**BEHIND_HTTPS)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_names_each_https_setting_left_out():
    result = _check_deploy(
        **{**BEHIND_HTTPS, "SECURE_HSTS_SECONDS": "0", "SECURE_SSL_REDIRECT": "false"}
    )
    assert result.returncode != 0
    assert "security.W004" in result.stderr
    assert "security.W008" in result.stderr
