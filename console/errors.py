from django.http import JsonResponse
from django.shortcuts import render
from django.views.defaults import page_not_found as django_page_not_found

from console.core.roles import DESCRIPTIONS


def permission_denied(request, exception=None):
    return render(
        request,
        "403.html",
        {"reason": str(exception) if exception else "", "role_descriptions": DESCRIPTIONS},
        status=403,
    )


def page_not_found(request, exception=None):
    # A URL under /api/ that matches no route answers as the API's own 404s do, in JSON.
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return django_page_not_found(request, exception)
