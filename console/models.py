"""The console app's models, where Django looks for them; the audit trail's live in its package."""

from console.audit.models import AuditEntry

__all__ = ["AuditEntry"]
