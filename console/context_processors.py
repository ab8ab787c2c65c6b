from django.utils.translation import gettext_lazy as _

from console.roles import roles_of

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
    return {"nav_items": items, "user_roles": roles_of(request.user)}
