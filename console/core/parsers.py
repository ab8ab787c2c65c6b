"""The API's JSON parser: bounded depth, bounded numbers, no NUL, never a RecursionError."""

import orjson
from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_JSON_DEPTH = 32
# The largest integer a JSON number carries exactly in every client (2^53); no field of the
# API needs more.
MAX_JSON_NUMBER = 2**53


class BoundedJSONParser(JSONParser):
    """orjson instead of the stdlib: it stops at 1024 levels with an error where json recurses
    into RecursionError (a 500), and rejects NaN, Infinity and lone surrogates. The walk then
    holds the body to what the API can use, naming where it went wrong."""

    def parse(self, stream, media_type=None, parser_context=None):
        # DRF reads the stream itself, past Django's DATA_UPLOAD_MAX_MEMORY_SIZE: bound it here.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise ParseError(f"JSON parse error - the body is larger than {limit} bytes")
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as error:
            raise ParseError(f"JSON parse error - {_reason(str(error))}") from None
        problem = check_json(data)
        if problem:
            raise ParseError(f"JSON parse error - {problem}")
        return data


def _reason(orjson_message: str) -> str:
    if orjson_message.startswith("depth limit exceeded"):
        return f"nested deeper than {MAX_JSON_DEPTH} levels"
    if orjson_message.startswith("number is infinity"):
        return f"a number beyond ±2^53 ({orjson_message.partition(': ')[2]})"
    return orjson_message


def check_json(data) -> str | None:
    """The first thing in decoded JSON the API refuses, with its place, or None."""
    pending = [(data, "body", 1)]
    while pending:
        value, where, depth = pending.pop()
        if depth > MAX_JSON_DEPTH:
            return f"nested deeper than {MAX_JSON_DEPTH} levels (at {where})"
        if isinstance(value, dict):
            for key, item in value.items():
                if "\x00" in key:
                    return f"a NUL character in a key (in {where})"
                pending.append((item, f"{where}.{key}", depth + 1))
        elif isinstance(value, list):
            pending.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, str):
            if "\x00" in value:
                return f"a NUL character in a string (at {where})"
        elif isinstance(value, int | float) and abs(value) > MAX_JSON_NUMBER:
            return f"a number beyond ±2^53 (at {where})"
    return None
