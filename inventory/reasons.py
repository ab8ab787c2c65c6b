"""Every module of inventory that declares reason codes, imported by the console's reasons
discovery (console.core.apps), so that a code stored by a worker renders in a web process
that never ran the code that stored it."""

from inventory.analytics import copeak, interference, kv_advisor, oom_triage
from inventory.ingest import reasons as ingest

__all__ = ["copeak", "ingest", "interference", "kv_advisor", "oom_triage"]
