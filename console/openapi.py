"""What the OpenAPI document says about refusals: each operation lists the 4xx it can answer."""

ERROR_SCHEMA = {
    "type": "object",
    "description": "Why the request was refused: `detail` for the request as a whole, else a "
    "list of messages per field (POST /api/placement/: `errors`, one field and message each).",
    "properties": {"detail": {"type": "string"}},
    "additionalProperties": True,
}

_REASONS = {
    "400": "Bad input; the body says which field and why.",
    "401": "No valid token or session.",
    "403": "The role may not do this.",
    "404": "No such object visible to you, or a page past the end.",
    "415": "The body is not in a media type the operation reads.",
    "429": "Busy: one exact solve per user at a time; retry after Retry-After seconds.",
}


def document_error_answers(result, generator, request, public):
    """drf-spectacular postprocessing hook. Every operation can answer 400 (any parameter or
    header may carry a NUL, which is refused before the view), 401 and 403; those with a path
    parameter or a page number 404; those with a body 415; the placement solver 429."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for path, operations in result.get("paths", {}).items():
        for operation in operations.values():
            codes = ["400", "401", "403"]
            parameters = {p["name"] for p in operation.get("parameters", [])}
            if "{" in path or "page" in parameters:
                codes.append("404")
            if "requestBody" in operation:
                codes.append("415")
            if operation.get("operationId") == "api_placement_create":
                codes.append("429")
            responses = operation.setdefault("responses", {})
            content = _error_content(responses)
            for code in codes:
                # An operation may describe a refusal of its own; the body is the same.
                answer = responses.setdefault(code, {"description": _REASONS[code]})
                answer.setdefault("content", content)
    return result


def _error_content(responses: dict) -> dict:
    # Refusals come in the operation's own media type (/metrics answers text, even a 401).
    answers = [response for code, response in responses.items() if code.startswith("2")]
    media_types = {media for response in answers for media in response.get("content", {})}
    if media_types and "application/json" not in media_types:
        return {media: {"schema": {"type": "string"}} for media in sorted(media_types)}
    return {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
