"""Reasons in the reader's language: the Django side of console.reasons.

Importing this module imports every module that registers reason messages, so a code
stored by a worker renders in a web process that never ran that code. A new owner of
reason codes (the gates, alerts) goes into REASON_MODULES.
"""

from importlib import import_module

from django.utils import timezone, translation

from console.reasons import Reason, render

REASON_MODULES = (
    "inventory.analytics.oom_triage",
    "console.placement.reasons",
    "console.proposals.gates.memory",
    "console.proposals.gates.kv",
    "console.proposals.gates.isolation",
    "console.proposals.gates.loadtest",
    "console.proposals.gates.engine_settings",
    "inventory.analytics.kv_advisor",
    "inventory.analytics.copeak",
    "inventory.analytics.interference",
    "console.ingest_reasons",
    "console.proposals.loadtest_failures",
)
for _module in REASON_MODULES:
    import_module(_module)


def render_here(reason: Reason | dict | str | None) -> str:
    """In the language and the time zone of the current request (or thread)."""
    return render(reason, translation, timezone.get_current_timezone())


def render_in(reason: Reason | dict | str | None, language: str) -> str:
    """In a given language, e.g. an e-mail for a user, a CSV export."""
    with translation.override(language):
        return render(reason, translation)
