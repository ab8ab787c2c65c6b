"""The console app's models, where Django looks for them; the audit trail's live in auditing."""

from console.core.api_tokens.models import ApiToken
from console.core.auditing.models import AuditEntry
from console.core.preferences.models import Preference

__all__ = ["ApiToken", "AuditEntry", "Preference"]
