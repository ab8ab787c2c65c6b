"""Reasons in the reader's language: the Django side of inventory.analytics.reasons.

Every app's `reasons` module is imported when Django starts (console.core.apps), so a code
stored by a worker renders in a web process that never ran that code. A new owner of reason
codes lists them in its app's `reasons` module.
"""

from django.utils import timezone, translation

from inventory.analytics.reasons import Reason, render


def render_here(reason: Reason | dict | str | None) -> str:
    """In the language and the time zone of the current request (or thread)."""
    return render(reason, translation, timezone.get_current_timezone())


def render_in(reason: Reason | dict | str | None, language: str) -> str:
    """In a given language, e.g. an e-mail for a user, a CSV export."""
    with translation.override(language):
        return render(reason, translation)
