"""Liveness: every process writes ``ts:{kind}:hb:{worker}`` (JSON, with a TTL) every ``heartbeat_ms``.

A key that exists is a live process; its JSON says what it is doing (``load()``).  Decoders'
heartbeats are load-bearing -- continuations, routes and turn takeovers follow them -- the
others' feed ``turnstream status``, ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from runtime import bus
from schemas import keys

log = logging.getLogger(__name__)


class Heartbeat:
    """Beats for one process; ``extra(pipe)`` may queue more writes in the same round trip."""

    def __init__(self, r: aioredis.Redis, kind: str, worker: str, every_ms: int, ttl_ms: int,
                 load: Callable[[], dict[str, Any]] = dict, extra: Callable[[Any], None] | None = None) -> None:
        self.r, self.kind, self.worker, self.every_ms, self.ttl_ms = r, kind, worker, every_ms, ttl_ms
        self.load, self.extra = load, extra
        self.key = keys.heartbeat(kind, worker)

    def snapshot(self) -> dict[str, Any]:
        return dict(self.load(), kind=self.kind, worker=self.worker, host=socket.gethostname(), pid=os.getpid(),
                    t=time.time())

    async def beat(self) -> None:
        pipe = self.r.pipeline(transaction=False)
        pipe.set(self.key, json.dumps(self.snapshot()), px=self.ttl_ms)
        if self.extra is not None:
            self.extra(pipe)
        await pipe.execute()

    async def loop(self) -> None:
        """Beat every ``every_ms`` until cancelled; a missed beat (Redis away) is logged, not fatal."""
        while True:
            await asyncio.sleep(self.every_ms / 1000)
            try:
                await self.beat()
            except bus.REDIS_DOWN as exc:
                log.warning("%s %s: heartbeat failed: %s", self.kind, self.worker, exc)

    async def stop(self) -> None:
        """This process is going away: say so at once rather than when the TTL lapses."""
        await self.r.delete(self.key)


async def live(r: aioredis.Redis, kind: str = "*") -> dict[str, dict[str, Any]]:
    """The live processes (of ``kind``, or every kind): heartbeat key -> its JSON."""
    found = [k async for k in r.scan_iter(match=keys.heartbeat(kind, "*"), count=500)]  # every master
    if not found:
        return {}
    values = await bus.get_each(r, found)  # GETs, not one MGET: on a cluster the keys span slots
    return {k.decode(): json.loads(v) for k, v in zip(found, values) if v is not None}
