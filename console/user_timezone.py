"""Dates in the reader's time zone: the browser says which (static/js/timezone.js sets a cookie).

Without the cookie, or with a zone the server does not know, pages show TIME_ZONE. Pages that
count in UTC on purpose (the OOM history's weeks) say so and keep UTC.
"""

import zoneinfo

from django.utils import timezone

COOKIE = "console_timezone"


class UserTimezoneMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        zone = _zone(request.COOKIES.get(COOKIE, ""))
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        return self.get_response(request)


def _zone(name: str) -> zoneinfo.ZoneInfo | None:
    if not name or len(name) > 64:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None
