import os
import stat

import pytest
from django.core.exceptions import ImproperlyConfigured

from console.secret_key import ensure_local_key, secret_key


@pytest.fixture
def no_key_configured(monkeypatch):
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.delenv("SECRET_KEY_FILE", raising=False)


def test_secret_key_wins_over_the_key_file(monkeypatch, tmp_path):
    (tmp_path / "mounted").write_text("from-the-file\n")
    monkeypatch.setenv("SECRET_KEY_FILE", str(tmp_path / "mounted"))
    monkeypatch.setenv("SECRET_KEY", "from-the-environment")
    assert secret_key(tmp_path / "local") == "from-the-environment"


def test_the_key_file_is_read_without_its_trailing_newline(
    no_key_configured, monkeypatch, tmp_path
):
    (tmp_path / "mounted").write_text("from-the-file\n")
    (tmp_path / "local").write_text("the-local-key")
    monkeypatch.setenv("SECRET_KEY_FILE", str(tmp_path / "mounted"))
    assert secret_key(tmp_path / "local") == "from-the-file"


@pytest.mark.parametrize(("content", "message"), [(None, "cannot read"), ("\n", "is empty")])
def test_a_missing_or_empty_key_file_is_an_error_not_a_fallback(
    no_key_configured, monkeypatch, tmp_path, content, message
):
    if content is not None:
        (tmp_path / "mounted").write_text(content)
    monkeypatch.setenv("SECRET_KEY_FILE", str(tmp_path / "mounted"))
    with pytest.raises(ImproperlyConfigured, match=message):
        secret_key(tmp_path / "local")


def test_without_any_key_a_process_signs_with_its_own_and_writes_none(no_key_configured, tmp_path):
    local = tmp_path / "var" / "secret_key"
    first, second = secret_key(local), secret_key(local)
    assert len(first) >= 50
    assert first != second
    assert not (tmp_path / "var").exists()


def test_the_local_key_is_created_once_private_and_whole(no_key_configured, tmp_path):
    local = tmp_path / "var" / "secret_key"
    permissive = os.umask(0)
    try:
        ensure_local_key(local)
    finally:
        os.umask(permissive)
    assert stat.S_IMODE(local.stat().st_mode) == 0o600
    key = secret_key(local)
    assert len(key) >= 50
    ensure_local_key(local)
    assert secret_key(local) == key
    assert os.listdir(local.parent) == ["secret_key"], "no temporary file is left behind"


def test_no_local_key_is_made_when_one_is_configured(no_key_configured, monkeypatch, tmp_path):
    monkeypatch.setenv("SECRET_KEY_FILE", str(tmp_path / "mounted"))
    ensure_local_key(tmp_path / "var" / "secret_key")
    assert not (tmp_path / "var").exists()
