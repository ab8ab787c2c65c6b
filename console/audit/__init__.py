"""The audit trail's pages and endpoint: who changed what, when, before and after.

The rows are written by console.core.auditing, which every app's do_* actions use.
"""
