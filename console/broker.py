"""The broker every process agrees on, from the environment alone.

Central processes read it through Django settings; host agents, which never load Django, read
it here directly.
"""

import os
from pathlib import Path

from console.env import env_str

BASE_DIR = Path(__file__).resolve().parent.parent


def broker_url() -> str:
    return env_str("CELERY_BROKER_URL") or "filesystem://"


def broker_transport_options() -> dict:
    """Folders of the server-less broker (created here, as the transport needs them)."""
    if not broker_url().startswith("filesystem://"):
        return {}
    folder = Path(env_str("CELERY_FILESYSTEM_BROKER_DIR") or BASE_DIR / "var" / "broker")
    for sub in ("queue", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": os.fspath(folder / "queue"),
        "data_folder_out": os.fspath(folder / "queue"),
        "control_folder": os.fspath(folder / "control"),
        "store_processed": False,
    }
