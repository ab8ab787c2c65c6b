"""The console's roles.

Each role is a Django group. Which permissions a group holds is set by data migrations (see
console/migrations), so an installation can still adjust a group in the admin; code checks
permissions, never group names, except to describe a user.
"""

from django.utils.translation import gettext_lazy as _

ONCALL = "oncall"
APPROVER = "approver"
MANAGER = "manager"
ROLES = (ONCALL, APPROVER, MANAGER)

DESCRIPTIONS = {
    ONCALL: _("browses host health, edits runbooks, acknowledges events"),
    APPROVER: _("everything on-call does, and signs off placement proposals"),
    MANAGER: _("reads everything, changes nothing"),
}
# How the navigation names a role; the group names themselves stay as they are.
LABELS = {
    ONCALL: _("on-call"),
    APPROVER: _("approver"),
    MANAGER: _("manager"),
    "admin": _("admin"),
}


def roles_of(user) -> list[str]:
    if not user.is_authenticated:
        return []
    if user.is_superuser:
        return ["admin"]
    names = set(user.groups.values_list("name", flat=True))
    return [role for role in ROLES if role in names]
