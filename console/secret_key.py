"""Where Django's SECRET_KEY comes from.

SECRET_KEY itself wins; else the file SECRET_KEY_FILE names (a mounted secret); else, for
local runs, the key generated once into var/secret_key. Reading settings never writes that
file: the entry points that serve pages (console.wsgi, `manage.py runserver`) create it, so
every process of a local console signs with one key that survives restarts. A process that
finds no key at all (a plain import, pytest, `manage.py place`) signs with a random key of its
own: nothing it signs can be forged or outlive it.
"""

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from console.env import env_str

LOCAL_KEY_FILE = Path(__file__).resolve().parent.parent / "var" / "secret_key"


def secret_key(local_key_file: Path = LOCAL_KEY_FILE) -> str:
    if env_str("SECRET_KEY"):
        return env_str("SECRET_KEY")
    if env_str("SECRET_KEY_FILE"):
        return _read_key(Path(env_str("SECRET_KEY_FILE")))
    if local_key_file.exists():
        return _read_key(local_key_file)
    return secrets.token_urlsafe(50)


def ensure_local_key(local_key_file: Path = LOCAL_KEY_FILE) -> None:
    """Generate the local key file unless a key is configured or the file exists.

    The key is written to a private temporary file and linked into place, so the file appears
    whole with mode 0600, and of two processes racing here both end up with the same key.
    """
    if env_str("SECRET_KEY") or env_str("SECRET_KEY_FILE") or local_key_file.exists():
        return
    write_private_file(local_key_file, secrets.token_urlsafe(50))


def write_private_file(path: Path, text: str, *, replace: bool = False) -> None:
    """Write a file only its owner may read, appearing whole (never half written).

    Without `replace`, a file already there stays: of two processes racing, both keep the
    first one's text.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w") as file:  # mkstemp creates it 0600
            file.write(text)
        if replace:
            os.replace(temporary, path)
            return
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def _read_key(path: Path) -> str:
    try:
        key = path.read_text().strip()
    except OSError as error:
        raise ImproperlyConfigured(f"cannot read the secret key {path}: {error.strerror}") from None
    if not key:
        raise ImproperlyConfigured(f"the secret key file {path} is empty")
    return key
