"""What every request goes through: its log context, its answer's Content-Security-Policy,
and a 400 for requests the database cannot even be asked about."""

from django.conf import settings
from django.http import HttpResponseBadRequest, JsonResponse

from console.core.auditing.context import start_request

NUL = "\x00"


class RejectNulMiddleware:
    """PostgreSQL text cannot hold NUL: psycopg refuses such a parameter with ValueError, so a
    NUL in the path, a parameter, a cookie or a header would end in a 500 wherever it reached a
    query. One check here instead of one per view."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        where = _where_nul(request)
        if where is None:
            return self.get_response(request)
        reason = f"NUL characters are not allowed (found in {where})."
        if request.path.startswith("/api/"):  # the API answers JSON, even here
            return JsonResponse({"detail": reason}, status=400)
        return HttpResponseBadRequest(reason, content_type="text/plain; charset=utf-8")


def _where_nul(request) -> str | None:
    if NUL in request.path:
        return "the path"
    for name, values in request.GET.lists():
        if NUL in name or any(NUL in value for value in values):
            return f"the query parameter {name.replace(NUL, '')!r}"
    for name, value in request.META.items():
        if name.startswith("HTTP_") and isinstance(value, str) and NUL in value:
            return f"the header {name[5:].replace('_', '-').title()}"
    if request.method == "POST" and request.content_type in _FORM_TYPES:
        for name, values in request.POST.lists():
            if NUL in name or any(NUL in value for value in values):
                return f"the form field {name.replace(NUL, '')!r}"
    return None


_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class RequestLogContextMiddleware:
    """Each request's log lines carry the change it opened (console.core.logs)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        start_request()
        return self.get_response(request)


class ContentSecurityPolicyMiddleware:
    """settings.CONTENT_SECURITY_POLICY on every answer: the pages load scripts, styles and
    plotly.js from the console itself and run no inline script, so a value that slipped past
    escaping could not run one either."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", settings.CONTENT_SECURITY_POLICY)
        return response
