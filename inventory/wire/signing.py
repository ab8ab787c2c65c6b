"""Batches signed by their host: HMAC-SHA256 over the message body, with the host's secret.

Registering a host issues it a secret (inventory.models.Host.agent_secret); its agent reads
the secret from a file (AGENT_SECRET_FILE) and signs every batch it publishes. The ingest
worker checks the signature against the secret of the host the batch names, so a batch can
neither claim another host nor change on its way. The body travels as the exact bytes signed.
"""

import hashlib
import hmac
import json
from typing import Any

HEADER = "batch-signature"
_SCHEME = "hmac-sha256="


def encode(batch: dict[str, Any]) -> bytes:
    return json.dumps(batch, separators=(",", ":")).encode()


def sign(secret: str, body: bytes) -> str:
    return _SCHEME + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, signature: Any) -> bool:
    if not secret or not isinstance(signature, str) or not signature.startswith(_SCHEME):
        return False
    return hmac.compare_digest(sign(secret, body), signature)
