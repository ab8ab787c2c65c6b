"""Files only their owner may read: secret keys, host secrets."""

import contextlib
import os
import tempfile
from pathlib import Path


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
