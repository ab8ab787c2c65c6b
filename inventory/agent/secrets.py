"""The agent's host secret, read from the file AGENT_SECRET_FILE names.

The file holds one host's secret (what `manage.py register_host --secret-file` writes), or a
JSON object of host name to secret for an agent that collects several. Without a file the
agent publishes unsigned batches, which ingest keeps as dead letters saying so.
"""

import json
import logging
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

SecretFor = Callable[[str], "str | None"]


def read_secrets(path: str) -> SecretFor:
    if not path:
        log.warning(
            "AGENT_SECRET_FILE is not set: batches go unsigned (ingest takes those only "
            "for hosts registered without a secret)"
        )
        return lambda host: None
    text = Path(path).read_text().strip()
    if text.startswith("{"):
        table = json.loads(text)
        if not all(isinstance(v, str) and v for v in table.values()):
            raise ValueError(f"{path}: expected an object of host name to secret")
        return table.get
    if not text:
        raise ValueError(f"{path} is empty")
    return lambda host: text
