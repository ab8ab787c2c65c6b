"""The auditing every write goes through: who changed what, when, before and after.

Each user action opens one change (console.core.auditing.changes): one transaction and one
change id, stamped on every audit row written inside it, so the rows of one action are found
together. This package's top level holds only what needs no model (the action enum and the
snapshots), so that the models module can import it. The trail's pages are console.audit.
"""

from console.core.auditing.actions import Action
from console.core.auditing.diff import changed_fields, snapshot

__all__ = ["Action", "changed_fields", "snapshot"]
