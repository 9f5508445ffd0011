"""Every error the gateway returns, in OpenAI's shape (Anthropic's on the ``/v1/messages``
routes: ``gateway.anthropic.errors``, chosen by the request's path).

    {"error": {"message": str, "type": str, "param": str | null, "code": str | null}}

``ApiError`` is the one exception the routes raise; the handlers installed by ``install``
also turn request-validation failures (400), unknown routes and Starlette's HTTP errors into
that shape.  Anything unexpected is caught by ``ErrorBoundary``, the outermost middleware: one
logged traceback and a 500 that names no internals.  (Not an ``Exception`` handler: Starlette
runs that one in its ``ServerErrorMiddleware``, which re-raises after responding, so uvicorn
logs the traceback again and closes the keep-alive connection.)
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway.anthropic import errors as anthropic_errors
from runtime import bus

log = logging.getLogger(__name__)

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 409: "conflict_error",
          413: "invalid_request_error", 415: "invalid_request_error", 422: "invalid_request_error",
          429: "rate_limit_error", 431: "invalid_request_error"}


class ApiError(Exception):
    """An error response: status, message, and OpenAI's ``type``/``param``/``code``."""

    def __init__(self, status: int, message: str, *, code: str | None = None, param: str | None = None,
                 type: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.type = type or _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        self.headers = headers or {}

    def body(self, path: str = "") -> dict[str, Any]:
        """The error body in the shape of the API that ``path`` belongs to."""
        if anthropic_errors.applies(path):
            return anthropic_errors.body(self.status, self.message)
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self, path: str = "") -> JSONResponse:
        return JSONResponse(self.body(path), status_code=self.status, headers=self.headers)


def not_found(what: str, code: str = "not_found") -> ApiError:
    return ApiError(404, f"{what} not found", code=code)


_SOURCES = ("body", "query", "path", "header", "cookie")
_TAG_ERRORS = ("union_tag_invalid", "union_tag_not_found")


def _client_path(error: dict[str, Any], body: Any) -> list[str | int]:
    """The parts of a pydantic error's ``loc`` that name places in what the client sent.

    ``loc`` also names union members (``constrained-str``, ``ToolDef``, ``literal[...]``): a
    part is kept only where the client's value has that key or index (or it is the missing
    field itself), so those drop out.
    """
    loc = list(error.get("loc", ()))
    if loc and loc[0] in _SOURCES:
        source, loc = loc[0], loc[1:]
        if source != "body":
            return loc
    parts: list[str | int] = []
    node = body
    for i, part in enumerate(loc):
        if isinstance(node, (dict, list)) and _has(node, part):
            parts.append(part)
            node = node[part]
        elif i == len(loc) - 1 and error.get("type") == "missing":
            parts.append(part)
    if error.get("type") in _TAG_ERRORS:
        parts.append(str(error.get("ctx", {}).get("discriminator", "")).strip("'\"") or "type")
    return parts


def _has(node: dict | list, part: str | int) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(part, int) and 0 <= part < len(node)


def format_param(parts: list[str | int]) -> str | None:
    """``["messages", 2, "content"]`` -> ``"messages[2].content"`` (OpenAI's ``param``)."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or None


def invalid(errors: list[dict[str, Any]], body: Any) -> ApiError:
    """A 400 for the validation error that reaches deepest into the client's value (of the errors
    pydantic reports for each member of a union, the one about the member the client meant)."""
    if not errors:
        return ApiError(400, "invalid request", code="invalid_value")
    paths = [_client_path(e, body) for e in errors]
    best = max(range(len(errors)), key=lambda i: len(paths[i]))  # the first on a tie
    param = format_param(paths[best])
    msg = errors[best].get("msg", "invalid value")
    return ApiError(400, f"{param}: {msg}" if param else msg, param=param, code="invalid_value")


def validation_error(exc: RequestValidationError) -> ApiError:
    """The validation problem that names the client's field most precisely, as a 400."""
    errors = exc.errors()
    if errors and errors[0].get("type") == "json_invalid":
        return ApiError(400, "the request body is not valid JSON", code="invalid_json")
    return invalid(list(errors), exc.body)


_ERROR_SCHEMA = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type"],
    "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                   "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}
_DOCUMENTED = {"400": "invalid request", "401": "missing or invalid API key", "404": "not found (or another key's)",
               "409": "conflict with the session's state", "413": "request body too large",
               "429": "rate limit exceeded (Retry-After)", "431": "request headers too large"}


def document(schema: dict[str, Any]) -> dict[str, Any]:
    """Rewrite an OpenAPI schema's error responses: OpenAI-shaped 4xx instead of FastAPI's 422."""
    components = schema.setdefault("components", {})
    components.setdefault("schemas", {}).update(ErrorResponse=_ERROR_SCHEMA,
                                                AnthropicErrorResponse=anthropic_errors.SCHEMA)
    components.setdefault("securitySchemes", {}).update(
        bearer={"type": "http", "scheme": "bearer"}, api_key={"type": "apiKey", "in": "header", "name": "x-api-key"})
    for path, ops in schema.get("paths", {}).items():
        if not path.startswith("/v1/"):
            continue
        name = "AnthropicErrorResponse" if anthropic_errors.applies(path) else "ErrorResponse"
        ref = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}
        for op in ops.values():
            op["responses"].pop("422", None)
            for status, text in _DOCUMENTED.items():
                op["responses"].setdefault(status, {"description": text, **ref})
            op["security"] = [{"bearer": []}, {"api_key": []}]
    schema["components"]["schemas"].pop("HTTPValidationError", None)
    schema["components"]["schemas"].pop("ValidationError", None)
    return schema


def install(app: FastAPI) -> None:
    """Register the handlers that give every error response the OpenAI shape (and document them)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response(request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(exc).response(request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else "request failed"
        return ApiError(exc.status_code, detail, headers=dict(exc.headers or {})).response(request.url.path)

    async def _broker_down(request: Request, exc: Exception) -> JSONResponse:
        """Redis unreachable or a cluster master failing over: the request can be retried (nothing
        was half-written that a retry would repeat: every write path is idempotent or one script)."""
        log.warning("%s %s: redis unavailable: %s", request.method, request.url.path, exc)
        return broker_unavailable(exc).response(request.url.path)

    for exc_type in bus.REDIS_DOWN:
        app.add_exception_handler(exc_type, _broker_down)


def broker_unavailable(exc: Exception) -> ApiError:
    return ApiError(503, f"the broker is unavailable ({str(exc)[:200]}); retry shortly", type="server_error",
                    code="redis_unavailable", headers={"Retry-After": "1"})


class ErrorBoundary:
    """The outermost middleware: an unexpected exception is logged once and answered with a 500
    (an HTTP response already under way is left unfinished, so the server closes that connection)
    or a WebSocket close 1011.  Nothing is re-raised to the server."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        answered = False  # an HTTP response started (a WebSocket's close after its end fails quietly)

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal answered
            answered = answered or message["type"] == "http.response.start"
            await send(message)

        try:  # a WebSocket's frames go out unwrapped: no wrapper for every frame
            await self.app(scope, receive, tracked if scope["type"] == "http" else send)
        except Exception:  # the gateway's outermost boundary
            log.exception("unhandled error on %s %s", scope.get("method", "WEBSOCKET"), scope.get("path"))
            if not answered:
                await _answer_500(scope, receive, send)


async def _answer_500(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        err = ApiError(500, "internal server error", type="server_error")
        await err.response(scope["path"])(scope, receive, send)
        return
    with contextlib.suppress(Exception):  # the socket may be gone already
        await send({"type": "websocket.close", "code": 1011, "reason": "internal error"})
