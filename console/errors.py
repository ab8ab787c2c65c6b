from django.shortcuts import render

from console.roles import DESCRIPTIONS


def permission_denied(request, exception=None):
    return render(
        request,
        "403.html",
        {"reason": str(exception) if exception else "", "role_descriptions": DESCRIPTIONS},
        status=403,
    )
