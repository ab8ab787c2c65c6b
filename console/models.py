"""The console app's models, where Django looks for them; the audit trail's live in its package."""

from console.audit.models import AuditEntry
from console.preferences.models import Preference

__all__ = ["AuditEntry", "Preference"]
