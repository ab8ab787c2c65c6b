"""Every page in the user's own time zone: Django's date filters convert to the active one."""

import zoneinfo

from django.utils import timezone


class UserTimeZoneMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        zone = _zone_of(request.user) if request.user.is_authenticated else None
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()


def _zone_of(user) -> zoneinfo.ZoneInfo | None:
    preference = getattr(user, "preference", None)
    if preference is None:
        return None
    try:
        return zoneinfo.ZoneInfo(preference.time_zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None
