"""The gateway process's shared parts, typed: built once by the app's lifespan (``gateway.app``)
and read by every route through ``gateway_state`` (or the ``State`` dependency), so a route says
which parts it uses and a type checker sees them, instead of attributes set on ``app.state``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends
from starlette.requests import HTTPConnection

from gateway.auth import KeyRing
from gateway.context import ContextCheck
from gateway.limits import RateLimiter
from gateway.metrics import Metrics
from gateway.relay import Relay
from gateway.sessions.ops import SessionOps
from runtime.config import Config
from runtime.heartbeat import Heartbeat
from runtime.tool_catalog import ToolCatalog


@dataclass
class GatewayState:
    cfg: Config
    keyring: KeyRing
    started: int  # unix time the process started (the models list's ``created``)
    redis: Any  # the process's Redis client (runtime.bus)
    metrics: Metrics
    catalog: ToolCatalog  # the server tools sessions may use, as the tool workers publish them
    limiter: RateLimiter
    ops: SessionOps
    context: ContextCheck
    relay: Relay
    heartbeat: Heartbeat | None = None
    followers: set[asyncio.Task[None]] = field(default_factory=set)  # background responses being followed


def gateway_state(conn: HTTPConnection) -> GatewayState:
    """The state of the app serving ``conn`` (an HTTP request or a WebSocket)."""
    return conn.app.state.gateway


async def _state(conn: HTTPConnection) -> GatewayState:  # async: FastAPI runs a plain def in a thread
    return conn.app.state.gateway


State = Annotated[GatewayState, Depends(_state)]
