"""What the console's log lines carry, in text or in JSON lines (LOG_FORMAT).

A refused request (any 4xx: a permission check, a missing object, bad input) is one line naming
the user, the path and the reason, never a traceback: any user can cause as many as they like.
Every line carries the change id of the request's audited change where there is one, so a line
leads to the audit trail and back. Neither ever holds a request's headers, and so no token.
"""

import datetime as dt
import json
import logging

from console.core.auditing.context import change_id_for_logs

# Where a view (the API's exception handler) leaves why it refused, for the request's line.
REFUSAL_REASON = "console_refusal_reason"
_REASON_LENGTH = 300


def note_refusal(request, reason: str) -> None:
    setattr(request, REFUSAL_REASON, reason)


class RequestContextFilter(logging.Filter):
    """On the handler: adds change_id, user, path and status to every record, and turns a
    refused request's record into its one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        change_id = change_id_for_logs()
        record.change_id = change_id.hex if change_id else ""
        request = getattr(record, "request", None)
        status = getattr(record, "status_code", None)
        record.user = _user(request) if request is not None else ""
        record.path = getattr(request, "path", "")
        record.status = status or ""
        if request is not None and isinstance(status, int) and 400 <= status < 500:
            _one_line(record, request, status)
        return True


def _user(request) -> str:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return "anonymous"
    return user.get_username()


def _one_line(record: logging.LogRecord, request, status: int) -> None:
    exception = record.exc_info[1] if record.exc_info else None
    reason = getattr(request, REFUSAL_REASON, "") or (str(exception) if exception else "")
    reason = " ".join(reason.split())[:_REASON_LENGTH] or record.getMessage().partition(":")[0]
    record.msg = "refused %s %s %s for %s: %s"
    record.args = (status, request.method, request.path, record.user, reason)
    record.exc_info = None
    record.exc_text = None
    record.stack_info = None


class JsonLinesFormatter(logging.Formatter):
    """One JSON object a line: at, level, logger, message, change_id, and the request's user,
    path and status when the line is about one; a traceback as one string."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "at": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("change_id", "user", "path", "status"):
            value = getattr(record, key, "")
            if value != "":
                line[key] = value
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)
