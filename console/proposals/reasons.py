"""Every module of the proposals app that declares reason codes (the gates, the load test's
failures, the placement solver it runs), imported by the console's reasons discovery
(console.core.apps)."""

from console.placement import reasons as placement
from console.proposals.gates import engine_settings, isolation, kv, loadtest, memory
from console.proposals.loadtest import failures

__all__ = ["engine_settings", "failures", "isolation", "kv", "loadtest", "memory", "placement"]
