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

import inspect
import json
import re
import types
import typing
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request, Response, params
from fastapi.routing import APIRoute
from pydantic import BaseModel

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
_DECLARED = "declared_json"  # and whether the request named a JSON content type (not none at all)


def check_body(scope: dict[str, Any], body: bytes) -> None:
    """Raise a 400 ApiError when an HTTP request's JSON body is not acceptable (other bodies pass);
    keep the value of an acceptable one for the route: a body is read as JSON when its content type
    is JSON or it names none."""
    if not body:
        return
    kind = _content_type(scope)
    if kind is None or _json_type(kind):
        state = scope.setdefault("state", {})
        state[_PARSED], state[_DECLARED] = loads(body), kind is not None


class _ParsedBodyRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            state = self.scope.get("state") or {}
            self._json = state[_PARSED] if _PARSED in state else await super().json()
        return self._json


class ParsedBodyRoute(APIRoute):
    """A route that reads the JSON value ``check_body`` kept instead of parsing the body again.

    A route whose endpoint takes one JSON object body (a pydantic model), the request and dependencies
    that only read the connection (``Caller``, ``State``), and answers with a ``Response``, is called
    directly (``_direct_call``): FastAPI's dependency solver and the objects it makes cost ~0.1 ms of a
    one-token chat completion's ~1 ms in the gateway.  The body is validated by FastAPI's own field;
    any other case -- no JSON object, a body not declared JSON, an invalid one (for FastAPI's own
    error), dependency overrides, another kind of endpoint -- goes through FastAPI's handler, as before."""

    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()
        direct = _direct_call(self)

        async def route(request: Request) -> Response:
            request = _ParsedBodyRequest(request.scope, request.receive)
            if direct is not None:
                response = await direct(request)
                if response is not None:
                    return response
            return await handler(request)

        return route


def _direct_call(route: APIRoute) -> Callable[[Request], Awaitable[Response | None]] | None:
    """The endpoint of ``route`` called with its body validated and its dependencies resolved, without
    FastAPI's solver (see ``ParsedBodyRoute``); it answers None when FastAPI's handler must take the
    request.  None when the endpoint is not of that kind."""
    dep = route.dependant
    if (len(dep.body_params) != 1 or dep.request_param_name is None or not _plain(dep)
            or not _answers_responses(dep.call)):
        return None
    body = dep.body_params[0]
    model = getattr(body.field_info, "annotation", None)
    if (type(body.field_info) is not params.Body or getattr(body.field_info, "embed", False)
            or not (isinstance(model, type) and issubclass(model, BaseModel))):
        return None  # a form, an embedded body, a body that is not one model
    needs: list[tuple[str, Callable[..., Awaitable[Any]], str]] = []
    for sub in dep.dependencies:
        conn = sub.request_param_name or sub.http_connection_param_name
        if sub.name is None or conn is None or sub.dependencies or sub.body_params or not _plain(sub):
            return None
        needs.append((sub.name, sub.call, conn))
    endpoint, request_name = dep.call, dep.request_param_name

    async def call(request: Request) -> Response | None:
        scope = request.scope
        state = scope.get("state") or {}
        value = state.get(_PARSED)
        if not isinstance(value, dict) or not state.get(_DECLARED) or _overridden(route, scope):
            return None  # no JSON object, or not declared JSON (FastAPI says what is wrong); a test's overrides
        kwargs: dict[str, Any] = {request_name: request}
        for name, dependency, conn in needs:
            kwargs[name] = await dependency(**{conn: request})
        kwargs[body.name], errors = body.validate(value, {}, loc=("body",))  # FastAPI's own validation
        if errors:
            return None  # FastAPI's handler validates again and answers with its error
        return await endpoint(**kwargs)

    return call


def _overridden(route: APIRoute, scope: dict[str, Any]) -> bool:
    """Whether dependencies are overridden (``app.dependency_overrides``, as tests do): FastAPI's solver
    applies them."""
    return any(getattr(owner, "dependency_overrides", None)
               for owner in (route.dependency_overrides_provider, scope.get("app")))


_OTHER_PARAMS = ("websocket_param_name", "response_param_name", "background_tasks_param_name",
                 "security_scopes_param_name")


def _plain(dep: Any) -> bool:
    """Whether a dependant is a coroutine function taking no path, query, header or cookie parameter and
    none of the connection's other objects (``_OTHER_PARAMS``)."""
    return (inspect.iscoroutinefunction(dep.call) and not (dep.path_params or dep.query_params or dep.header_params
                                                           or dep.cookie_params)
            and not any(getattr(dep, name, None) for name in _OTHER_PARAMS))


def _answers_responses(endpoint: Callable[..., Any]) -> bool:
    """Whether ``endpoint`` is annotated to return ``Response`` objects only (nothing FastAPI serialises)."""
    try:
        hint = typing.get_type_hints(endpoint).get("return")
    except Exception:  # an annotation that does not resolve here: FastAPI's handler
        return False
    kinds = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return all(isinstance(k, type) and issubclass(k, Response) for k in kinds)


def _content_type(scope: dict[str, Any]) -> str | None:
    """The request's media type, lower case, without parameters; None when it names none."""
    for k, v in scope.get("headers", ()):
        if k.lower() == b"content-type":
            return v.decode("latin-1").split(";")[0].strip().lower()
    return None


def _json_type(kind: str) -> bool:
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


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
