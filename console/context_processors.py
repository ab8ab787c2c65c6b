from django.utils.functional import SimpleLazyObject
from django.utils.translation import gettext_lazy as _

from console.core.roles import roles_of

NAVIGATION = (
    ("fleet", _("Fleet"), "/"),
    ("models", _("Models"), "/models/"),
    ("oom", _("OOM history"), "/oom/"),
    ("proposals", _("Proposals"), "/proposals/"),
    ("runbooks", _("Runbooks"), "/runbooks/"),
    ("audit", _("Audit trail"), "/audit/"),
    ("ingest", _("Dead letters"), "/ingest/dead-letters/"),
)


def navigation(request) -> dict:
    path = request.path
    items = []
    for key, label, url in NAVIGATION:
        active = path == url if url == "/" else path.startswith(url)
        if key == "fleet" and path.startswith("/hosts/"):
            active = True
        items.append({"key": key, "label": label, "url": url, "active": active})
    # Lazy: a fragment (the board's refresh, the host analyses) renders no navigation, and
    # should not pay a query for it.
    return {"nav_items": items, "user_roles": SimpleLazyObject(lambda: roles_of(request.user))}
