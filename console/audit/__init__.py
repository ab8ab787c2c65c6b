"""The audit trail: who changed what, when, and what it looked like before and after.

Each user action opens one change (console.audit.changes): one transaction and one change
id, stamped on every audit row written inside it, so the rows of one action are found
together. This package's top level holds only what needs no model (the action enum and the
snapshots), so that the models module can import it.
"""

from console.audit.actions import Action
from console.audit.diff import changed_fields, snapshot

__all__ = ["Action", "changed_fields", "snapshot"]
