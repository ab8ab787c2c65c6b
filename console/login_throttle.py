"""Login throttling (django-axes): whose attempts count together, and the lockout page."""

from axes.helpers import get_client_username, get_cool_off
from django.conf import settings
from django.shortcuts import render


def client_ip(request) -> str | None:
    """REMOTE_ADDR, or behind the one reverse proxy the address that proxy appended.

    Only the last X-Forwarded-For entry is the proxy's own word; anything before it is what the
    client chose to send, and trusting it would let an attacker pick a fresh address for every
    guess.
    """
    if settings.BEHIND_PROXY:
        last = request.META.get("HTTP_X_FORWARDED_FOR", "").rsplit(",", 1)[-1].strip()
        if last:
            return last
    return request.META.get("REMOTE_ADDR")


def locked_out(request, original_response=None, credentials=None):
    context = {
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "username": get_client_username(request, credentials) or "",
        "cooloff_minutes": round(get_cool_off(request).total_seconds() / 60),
    }
    return render(
        request,
        "registration/locked_out.html",
        context,
        status=settings.AXES_HTTP_RESPONSE_CODE,
    )
