"""Request limits: header size (431), body size (413), counts (400), and the per-key rate limit (429).

* ``HeaderLimitMiddleware`` refuses a request (HTTP or a WebSocket handshake) whose header
  names and values total more than ``max_header_bytes`` (the HTTP server sets no such limit).
* ``BodyLimitMiddleware`` reads at most ``max_request_bytes`` of an HTTP body before the app
  sees it (a larger ``Content-Length`` is refused unread), runs ``check`` on it (the JSON edge,
  ``gateway.strict_json``) and replays it to the app.
* ``check_counts`` enforces the configured message, tool, turn and token limits.
* ``RateLimiter`` is a token bucket per API key, kept in Redis so that every gateway replica
  shares it: ``rate_limit_rps`` tokens per second refill a bucket of ``rate_limit_burst``; a
  request (an HTTP call, a WebSocket connect, a WebSocket message) takes one token.  An empty
  bucket answers 429 with ``Retry-After`` (whole seconds, rounded up).  Open (dev) mode and
  ``rate_limit_rps <= 0`` disable it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from gateway.auth import Principal, reject
from gateway.errors import ApiError
from schemas import keys
from runtime.config import Config

# KEYS[1] bucket hash; ARGV: rate/s, burst, now (s); returns {allowed 0|1, seconds to wait}
_BUCKET = """
local rate, burst, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1]) or burst
local ts = tonumber(b[2]) or now
if now < ts then now = ts end
tokens = math.min(burst, tokens + (now - ts) * rate)
local allowed, wait = 0, 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {allowed, tostring(wait)}
"""


class RateLimiter:
    """A shared token bucket per principal (one Lua round trip per request)."""

    def __init__(self, r: aioredis.Redis, rps: float, burst: int) -> None:
        self.rps, self.burst = rps, burst
        self._script = r.register_script(_BUCKET)

    async def take(self, principal: Principal) -> None:
        """Take one token for ``principal``; raises a 429 ApiError (with Retry-After) when none is left."""
        if self.rps <= 0 or principal.anonymous:
            return
        allowed, wait = await self._script(keys=[keys.rate_limit(principal.bucket)],
                                           args=[self.rps, self.burst, repr(time.time())])
        if not int(allowed):
            retry = max(1, math.ceil(float(wait)))
            raise ApiError(429, f"rate limit exceeded ({self.rps:g} requests/s, burst {self.burst}); "
                                f"retry in {retry} s", code="rate_limit_exceeded",
                           headers={"Retry-After": str(retry)})


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"request body exceeds {limit} bytes", code="request_too_large")


class HeaderLimitMiddleware:
    """Refuses requests whose headers total more than ``limit`` bytes with 431, before anything reads them."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and sum(len(k) + len(v) for k, v in scope["headers"]) > self.limit:
            await reject(scope, receive, send, ApiError(431, f"request headers exceed {self.limit} bytes",
                                                        code="request_headers_too_large"))
            return
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Refuses HTTP bodies over ``limit`` bytes with 413; smaller ones are buffered, passed to
    ``check`` (which raises an ApiError to refuse one) and replayed."""

    def __init__(self, app: Any, limit: int, check: Callable[[dict[str, Any], bytes], None] | None = None) -> None:
        self.app, self.limit, self.check = app, limit, check

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await reject(scope, receive, send, too_large(self.limit))
            return
        body = await self._read(receive)
        if body is None:
            await reject(scope, receive, send, too_large(self.limit))
            return
        try:
            if self.check is not None:
                self.check(scope, body)
        except ApiError as err:
            await reject(scope, receive, send, err)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Any) -> bytes | None:
        """The whole body, or None once it grows past the limit."""
        parts: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                break
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return None
            parts.append(chunk)
            if not msg.get("more_body", False):
                break
        return b"".join(parts)


def _content_length(scope: dict[str, Any]) -> int | None:
    for k, v in scope.get("headers", ()):
        if k.lower() == b"content-length":
            try:
                return int(v)
            except ValueError:
                return None
    return None


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later calls wait for the disconnect

    return replay


def check_counts(cfg: Config, *, messages: int | None = None, tools: int | None = None,
                 max_turns: int | None = None, max_tokens: int | None = None, tokens_param: str = "max_tokens") -> None:
    """Raise a 400 ApiError naming the first configured limit a request exceeds (``max_tokens``
    under the name the client sent it as, ``tokens_param``)."""
    for param, value, limit in (("messages", messages, cfg.max_messages), ("tools", tools, cfg.max_tools),
                                ("max_turns", max_turns, cfg.max_turns_limit),
                                (tokens_param, max_tokens, cfg.max_tokens_limit)):
        if value is not None and value > limit:
            raise ApiError(400, f"{param}: {value} exceeds this server's limit of {limit}", param=param,
                           code="limit_exceeded")
