from console.roles import roles_of

NAVIGATION = (
    ("fleet", "Fleet", "/"),
    ("models", "Models", "/models/"),
    ("oom", "OOM history", "/oom/"),
    ("proposals", "Proposals", "/proposals/"),
    ("runbooks", "Runbooks", "/runbooks/"),
    ("audit", "Audit trail", "/audit/"),
    ("ingest", "Dead letters", "/ingest/dead-letters/"),
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
