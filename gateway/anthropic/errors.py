"""Errors in Anthropic's shape, on the Anthropic routes (``/v1/messages`` and below) only.

    {"type": "error", "error": {"type": str, "message": str}}

The status code is kept; ``error.type`` follows it as Anthropic's API does (400
``invalid_request_error``, 401 ``authentication_error``, 403 ``permission_error``, 404
``not_found_error``, 413 ``request_too_large``, 429 ``rate_limit_error``, 529
``overloaded_error``, other 5xx ``api_error``).  ``gateway.errors`` asks ``applies(path)`` to
pick this shape for a request; everything else stays in OpenAI's shape.
"""

from __future__ import annotations

from typing import Any

PREFIX = "/v1/messages"
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}


def applies(path: str) -> bool:
    """Whether a request to ``path`` gets its errors in Anthropic's shape."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def error_type(status: int) -> str:
    return _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def body(status: int, message: str) -> dict[str, Any]:
    """The error body for ``status``, as Anthropic writes it (also the data of an SSE ``error`` event)."""
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


SCHEMA = {"type": "object", "required": ["type", "error"], "properties": {
    "type": {"const": "error"},
    "error": {"type": "object", "required": ["type", "message"],
              "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}}}
