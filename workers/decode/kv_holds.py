"""How long the engine keeps a session's KV after one of its turns ends.

    turn ends ───> provisional pin: max(pin_default_s, keep_kv_s)   (the parser is still finishing)
    TurnParsed ──> calls:    pin for the calls' expected wait (2 x EWMA + 1 s), at least keep_kv_s
                   no calls: pin for keep_kv_s (a client's cache TTL), else release

The expected wait comes from ``ts:tools:dur`` (``runtime.durations``); every pin is capped by
``pin_max_s``.  The decoder learns what a turn called from the parser (``TurnParsed``, on its
private stream), never by parsing.  A ``TurnParsed`` for a turn this decoder no longer holds
as the session's latest (a stale or adopted one) changes nothing.
"""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from runtime.config import Config
from runtime.session import SessionInfo
from schemas import keys
from schemas.events import TurnParsed
from workers.decode.engine import Engine


class KvHolds:
    def __init__(self, cfg: Config, engine: Engine, r: aioredis.Redis) -> None:
        self.cfg, self.engine, self.r = cfg, engine, r
        self._held: dict[str, tuple[int, float, float]] = {}  # sid -> (turn, keep_kv_s, since)

    def keep_s(self, info: SessionInfo) -> float:
        """The client's requested KV lifetime after a turn (``params.keep_kv_s``), capped."""
        try:
            keep = float(info.params.get("keep_kv_s") or 0.0)
        except (TypeError, ValueError):
            keep = 0.0
        return min(max(keep, 0.0), self.cfg.pin_max_s)

    def turn_ended(self, info: SessionInfo, turn: int) -> None:
        """Pin provisionally: the turn's calls are not known yet."""
        keep = self.keep_s(info)
        self._held[info.sid] = (turn, keep, time.monotonic())
        self.engine.pin(info.sid, min(self.cfg.pin_max_s, max(keep, self.cfg.pin_default_s)))

    async def parsed(self, job: TurnParsed) -> None:
        """The parser says what ``job.turn`` called: pin for that long, or release."""
        held = self._held.get(job.sid)
        if held is None or held[0] != job.turn:
            return
        keep = held[1]
        if job.calls:
            self.engine.pin(job.sid, max(keep, await self.tool_wait(job.calls)))
        elif keep > 0:
            self.engine.pin(job.sid, keep)
        else:
            self.engine.release(job.sid)
            del self._held[job.sid]

    async def tool_wait(self, names: list[str]) -> float:
        """Expected wait for these tools (EWMA of measured durations), with slack, capped."""
        est = await self.r.hmget(keys.TOOL_DURATIONS, *names)
        ms = max((float(e) if e else self.cfg.pin_default_s * 1000) for e in est)
        return min(self.cfg.pin_max_s, 2.0 * ms / 1000 + 1.0)

    def prune(self) -> None:
        """Forget sessions whose every pin has lapsed."""
        horizon = time.monotonic() - self.cfg.pin_max_s - 1.0
        for sid in [s for s, (_, _, since) in self._held.items() if since < horizon]:
            del self._held[sid]
