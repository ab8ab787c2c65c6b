"""Where Django's SECRET_KEY comes from.

SECRET_KEY itself wins; else the file SECRET_KEY_FILE names (a mounted secret); else, for
local runs, the key generated once into var/secret_key. Reading settings never writes that
file: the entry points that serve pages (console.wsgi, `manage.py runserver`) create it, so
every process of a local console signs with one key that survives restarts. A process that
finds no key at all (a plain import, pytest, `manage.py place`) signs with a random key of its
own: nothing it signs can be forged or outlive it.
"""

import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from console.core.private_files import write_private_file
from inventory.env import env_str

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


def _read_key(path: Path) -> str:
    try:
        key = path.read_text().strip()
    except OSError as error:
        raise ImproperlyConfigured(f"cannot read the secret key {path}: {error.strerror}") from None
    if not key:
        raise ImproperlyConfigured(f"the secret key file {path} is empty")
    return key
