"""Client JSON, checked at the edge before any route sees it: every HTTP body (through
``gateway.limits.BodyLimitMiddleware``) and every WebSocket message.

Refused with a 400 in OpenAI's shape:

* not UTF-8, not JSON, nested past the parser's depth limit, a number too long to convert
  -> ``code: "invalid_json"``;
* a lone UTF-16 surrogate (``"\\ud800"``: JSON's escapes can spell one, but it is not Unicode
  text, and no store or response could encode it) in a string or a key -> ``code:
  "invalid_value"``, ``param`` naming the field as OpenAI does (``messages[2].content``).

The bad text itself is never echoed (it could not be encoded in the answer either).

A body is parsed once: ``check_body`` keeps the value in the request's scope and the routes
(``ParsedBodyRoute``) validate that value instead of parsing the bytes again.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from gateway.errors import ApiError

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # the only way a surrogate gets into a JSON text


def loads(data: bytes | str) -> Any:
    """The JSON value of ``data``; a 400 ApiError when it is not acceptable (see the module doc)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise _invalid("it is not UTF-8 text") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _invalid(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise _invalid("it is nested too deeply") from None
    except ValueError:  # an integer with more digits than Python converts
        raise _invalid("a number in it is too long") from None
    if _SURROGATE_ESCAPE.search(text):
        _refuse_surrogates(value)
    return value


_PARSED = "parsed_json"  # where check_body keeps the body's value, in the scope's state


def check_body(scope: dict[str, Any], body: bytes) -> None:
    """Raise a 400 ApiError when an HTTP request's JSON body is not acceptable (other bodies pass);
    keep the value of an acceptable one for the route."""
    if body and _is_json(scope):
        scope.setdefault("state", {})[_PARSED] = loads(body)


class _ParsedBodyRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            state = self.scope.get("state") or {}
            self._json = state[_PARSED] if _PARSED in state else await super().json()
        return self._json


class ParsedBodyRoute(APIRoute):
    """A route that reads the JSON value ``check_body`` kept instead of parsing the body again."""

    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(_ParsedBodyRequest(request.scope, request.receive))

        return route


def _is_json(scope: dict[str, Any]) -> bool:
    """Whether the body is read as JSON: a JSON content type, or none at all."""
    for k, v in scope.get("headers", ()):
        if k.lower() == b"content-type":
            kind = v.decode("latin-1").split(";")[0].strip().lower()
            return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))
    return True


def _invalid(why: str) -> ApiError:
    return ApiError(400, f"the request body is not valid JSON: {why}", code="invalid_json")


def _refuse_surrogates(value: Any) -> None:
    """Raise naming the first string or key (depth first) that holds a lone surrogate."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if not is_text(node):
                raise _surrogate(path, "holds")
        elif isinstance(node, dict):
            if not all(is_text(k) for k in node):
                raise _surrogate(path, "has a key with")
            stack += reversed([(v, f"{path}.{k}" if path else k) for k, v in node.items()])
        elif isinstance(node, list):
            stack += reversed([(v, f"{path}[{i}]") for i, v in enumerate(node)])


def is_text(s: str) -> bool:
    """Whether ``s`` is Unicode text (no lone surrogate: it encodes as UTF-8)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _surrogate(path: str, how: str) -> ApiError:
    return ApiError(400, f"{path or 'the body'} {how} a lone UTF-16 surrogate (like \\ud800), which is not "
                         "Unicode text", param=path or None, code="invalid_value")
