"""API keys: who is calling, checked before the gateway reads a request's body.

Keys come from ``Config.api_keys`` (``TURNSTREAM_API_KEYS``, comma-separated) and from the
file ``Config.api_keys_file`` (one key per line, ``#`` comments).  An entry is either the key
itself or ``sha256:<64 hex>`` (its SHA-256, so the plaintext need not be stored anywhere).
Only SHA-256 digests are kept in memory.  No keys configured = open (dev) mode: every caller
is the same anonymous principal, and a warning is logged at start.

A request presents its key as ``Authorization: Bearer <key>`` or, as Anthropic's clients do,
``x-api-key: <key>`` (on every route; Bearer wins when both are sent).  A WebSocket may instead use
the query parameter ``?token=<key>`` or offer the subprotocol ``bearer.<key>`` (browsers
cannot set headers on a WebSocket); the server then selects ``turnstream.v1`` if that was
offered too, else echoes ``bearer.<key>``.

A session belongs to the principal that created it (``key_id``, a prefix of the key's
digest, stored in the session record); any other key gets 404, never 403, so ids leak nothing.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import Depends
from starlette.requests import HTTPConnection

from gateway.errors import ApiError
from runtime.config import Config, ConfigError

log = logging.getLogger(__name__)

SUBPROTOCOL = "turnstream.v1"
BEARER_PROTOCOL = "bearer."
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
KEY_ID_CHARS = 24


@dataclass(frozen=True)
class Principal:
    """The caller: ``key_id`` owns sessions ("" in open mode); ``bucket`` is its rate-limit bucket."""

    key_id: str
    bucket: str

    @property
    def anonymous(self) -> bool:
        return not self.key_id


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def parse_entry(entry: str) -> str:
    """The SHA-256 hex digest named by one configured key entry."""
    entry = entry.strip()
    if entry.startswith("sha256:"):
        hexd = entry[len("sha256:"):].lower()
        if not _HEX64.match(hexd):
            raise ConfigError(f"api_keys: invalid entry {entry[:14]!r}...; expected sha256:<64 hex digits>")
        return hexd
    return digest(entry)


def _file_entries(path: str) -> list[str]:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"api_keys_file: cannot read {path!r} ({exc.strerror})") from exc
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


class KeyRing:
    """The configured keys, as digests; ``identify`` maps a presented key to a Principal."""

    def __init__(self, digests: Iterable[str]) -> None:
        self.digests = frozenset(digests)

    @classmethod
    def from_config(cls, cfg: Config) -> KeyRing:
        entries = list(cfg.api_keys) + (_file_entries(cfg.api_keys_file) if cfg.api_keys_file else [])
        ring = cls(parse_entry(e) for e in entries if e.strip())
        if ring.open:
            log.warning("gateway: no API keys configured -- OPEN (dev) mode, every caller is trusted")
        return ring

    @property
    def open(self) -> bool:
        return not self.digests

    def identify(self, token: str | None, client: str = "") -> Principal:
        """The principal presenting ``token``; raises a 401 ApiError when it is missing or unknown."""
        if self.open:
            return Principal("", f"open:{client}")
        if not token:
            raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'",
                           code="missing_api_key")
        d = digest(token)
        if d not in self.digests:
            raise ApiError(401, "invalid API key", code="invalid_api_key")
        return Principal(d[:KEY_ID_CHARS], d[:KEY_ID_CHARS])


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def _bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def offered_subprotocols(scope: dict[str, Any]) -> list[str]:
    raw = _header(scope, b"sec-websocket-protocol") or ""
    return [p.strip() for p in raw.split(",") if p.strip()]


def presented_token(scope: dict[str, Any]) -> str | None:
    """The key a request presents: the Bearer header, else ``x-api-key``; for a WebSocket also
    ``?token=`` or the subprotocol."""
    token = _bearer(_header(scope, b"authorization")) or (_header(scope, b"x-api-key") or "").strip() or None
    if token or scope["type"] != "websocket":
        return token
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    if query.get("token"):
        return query["token"][0]
    for proto in offered_subprotocols(scope):
        if proto.startswith(BEARER_PROTOCOL):
            return proto[len(BEARER_PROTOCOL):]
    return None


def select_subprotocol(scope: dict[str, Any]) -> str | None:
    """The subprotocol to accept a WebSocket with (browsers fail the handshake if none is chosen)."""
    offered = offered_subprotocols(scope)
    if SUBPROTOCOL in offered:
        return SUBPROTOCOL
    return next((p for p in offered if p.startswith(BEARER_PROTOCOL)), offered[0] if offered else None)


def client_address(scope: dict[str, Any]) -> str:
    client = scope.get("client")
    return client[0] if client else ""


async def reject(scope: dict[str, Any], receive: Any, send: Any, err: ApiError) -> None:
    """Answer a request with ``err`` before the app sees it (a WebSocket gets an HTTP denial)."""
    if scope["type"] == "http":
        await err.response(scope["path"])(scope, receive, send)
        return
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        await err.response(scope["path"])(scope, receive, send)
    else:
        await send({"type": "websocket.close", "code": 4000 + err.status, "reason": err.message[:120]})


class AuthMiddleware:
    """Authenticates and rate-limits every ``/v1/`` request (HTTP and WebSocket) before its body
    is read, and puts the ``Principal`` in ``scope["state"]["principal"]``.  Other paths
    (``/healthz``, ``/metrics``, the playground, the OpenAPI schema) stay open."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        state = scope["app"].state.gateway
        try:
            principal = state.keyring.identify(presented_token(scope), client_address(scope))
            await state.limiter.take(principal)
        except ApiError as err:
            await reject(scope, receive, send, err)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def principal(conn: HTTPConnection) -> Principal:
    """The caller, authenticated by ``AuthMiddleware``."""
    return conn.state.principal


async def _caller(conn: HTTPConnection) -> Principal:  # async: FastAPI runs a plain def in a thread
    return conn.state.principal


Caller = Annotated[Principal, Depends(_caller)]
