"""The API's refusals: DRF's answers, with their reason kept for the request's log line, and a
body over DATA_UPLOAD_MAX_MEMORY_SIZE answered in JSON like any other bad input (Django alone
answers it with an HTML page and logs it as an error)."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework.exceptions import ParseError
from rest_framework.views import exception_handler as drf_exception_handler

from console.core.logs import note_refusal


def exception_handler(exc, context):
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        exc = ParseError(f"the body is larger than {limit} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)")
    response = drf_exception_handler(exc, context)
    if response is not None:
        note_refusal(context["request"]._request, _reason(response.data))
    return response


def _reason(data) -> str:
    """One line out of DRF's answer: `detail`, or the fields and their first messages."""
    if isinstance(data, dict) and set(data) == {"detail"}:
        return str(data["detail"])
    if isinstance(data, dict):
        return "; ".join(f"{field}: {_first(messages)}" for field, messages in data.items())
    return _first(data)


def _first(messages) -> str:
    if isinstance(messages, list) and messages:
        return _first(messages[0])
    if isinstance(messages, dict):
        return _reason(messages)
    return str(messages)
