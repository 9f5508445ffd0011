"""Every error the gateway returns, in OpenAI's shape (Anthropic's on the ``/v1/messages``
routes: ``gateway.anthropic_errors``, chosen by the request's path).

    {"error": {"message": str, "type": str, "param": str | null, "code": str | null}}

``ApiError`` is the one exception the routes raise; the handlers installed by ``install``
also turn request-validation failures (400), unknown routes and Starlette's HTTP errors into
that shape, and anything unexpected into a 500 that names no internals.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway import anthropic_errors

log = logging.getLogger(__name__)

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 409: "conflict_error",
          413: "invalid_request_error", 415: "invalid_request_error", 422: "invalid_request_error",
          429: "rate_limit_error"}


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


def unsupported(param: str, what: str) -> ApiError:
    """A 400 naming a request field whose value this server does not implement."""
    return ApiError(400, f"{param}: {what} is not supported by this server", param=param, code="unsupported_value")


def _param(loc: tuple[Any, ...]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or None


def validation_error(exc: RequestValidationError) -> ApiError:
    """The first validation problem, as a 400 naming the offending parameter."""
    errors = exc.errors()
    if not errors:
        return ApiError(400, "invalid request")
    first = errors[0]
    param = _param(tuple(first.get("loc", ())))
    msg = first.get("msg", "invalid value")
    if first.get("type") == "json_invalid":
        return ApiError(400, "the request body is not valid JSON", code="invalid_json")
    return ApiError(400, f"{param}: {msg}" if param else msg, param=param, code="invalid_value")


_ERROR_SCHEMA = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type"],
    "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                   "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}
_DOCUMENTED = {"400": "invalid request", "401": "missing or invalid API key", "404": "not found (or another key's)",
               "409": "conflict with the session's state", "413": "request body too large",
               "429": "rate limit exceeded (Retry-After)"}


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

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:  # the outermost boundary
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return ApiError(500, "internal server error", type="server_error").response(request.url.path)
