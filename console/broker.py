"""The broker every process agrees on, from the environment alone.

Central processes read it through Django settings; host agents, which never load Django, read
it here directly. Reading it has no side effect: the folder broker makes its folders when a
process first opens a channel on it (`FolderTransport`), so a command that never touches the
broker leaves the disk alone.
"""

import os
from pathlib import Path

from kombu.transport import TRANSPORT_ALIASES, filesystem

from console.env import env_str

BASE_DIR = Path(__file__).resolve().parent.parent


def broker_url() -> str:
    return env_str("CELERY_BROKER_URL") or "filesystem://"


def broker_transport_options() -> dict:
    """The folders of the server-less broker, when it is the one in use."""
    if not broker_url().startswith("filesystem://"):
        return {}
    folder = Path(env_str("CELERY_FILESYSTEM_BROKER_DIR") or BASE_DIR / "var" / "broker")
    return {
        "data_folder_in": os.fspath(folder / "queue"),
        "data_folder_out": os.fspath(folder / "queue"),
        "control_folder": os.fspath(folder / "control"),
        "store_processed": False,
    }


class FolderChannel(filesystem.Channel):
    """kombu's filesystem channel, which expects its folders to exist, making them first."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for folder in {self.data_folder_in, self.data_folder_out, self.control_folder}:
            Path(folder).mkdir(parents=True, exist_ok=True)


class FolderTransport(filesystem.Transport):
    Channel = FolderChannel


# Every process that reaches the broker has imported this module for its URL: from here on
# `filesystem://` means the transport above, for Celery apps and plain kombu connections alike.
TRANSPORT_ALIASES["filesystem"] = f"{__name__}:FolderTransport"
