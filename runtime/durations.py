"""How long each tool takes: an EWMA per tool name in ``ts:tools:dur`` (milliseconds).

Tool workers and client-side results feed it; decoders read it (``HMGET``) to pin a turn's KV
blocks for the expected wait.  The update is one script on one key, so concurrent workers
never lose an update (and it runs unchanged on a Redis Cluster).
"""

from __future__ import annotations

import redis.asyncio as aioredis

from schemas import keys

ALPHA = 0.3

_EWMA = """
local prev = redis.call('HGET', KEYS[1], ARGV[1])
local v = tonumber(ARGV[2])
if prev then v = (1 - tonumber(ARGV[3])) * tonumber(prev) + tonumber(ARGV[3]) * v end
local s = string.format('%.3f', v)
redis.call('HSET', KEYS[1], ARGV[1], s)
return s
"""


class Durations:
    """The per-tool duration estimates."""

    def __init__(self, r: aioredis.Redis, alpha: float = ALPHA) -> None:
        self.r, self.alpha = r, alpha
        self._ewma = r.register_script(_EWMA)

    async def learn(self, name: str, ms: float) -> float:
        """Fold one measured duration into ``name``'s estimate; returns the new estimate."""
        return float(await self._ewma(keys=[keys.TOOL_DURATIONS], args=[name, f"{max(ms, 0.0):.3f}", self.alpha]))
