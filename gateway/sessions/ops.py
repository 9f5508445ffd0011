"""The session operations behind the HTTP and WebSocket API, one method per operation.

Every method that names a session checks that it belongs to the caller; another key's
session, or one that does not exist (or has expired), is the same 404.

Status transitions (the session record's ``status``)::

    create ──> active ──(turn without calls | max_turns | error)──> ended
                 │  └──────────────(cancel)─────────────────────────> cancelled
                 └<──(add_message: a new user turn, on ended or cancelled)──┘
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from gateway.auth import Principal
from gateway.errors import ApiError, not_found
from gateway.metrics import Metrics
from schemas import keys
from schemas.codec import encode
from schemas.events import StartTurn
from runtime import bus, cluster, routing
from runtime.barrier import Arrival
from runtime.client_calls import ClientResultError, submit_client_result
from runtime.config import Config
from runtime.session import Field, SessionInfo, SessionMode, Status, new_sid
from runtime.turns import Turns

log = logging.getLogger(__name__)

# Continue an ended/cancelled session at turn ARGV[2] = ARGV[1] + 1, atomically:
# KEYS: session hash, messages, token log, event stream.  ARGV: turn, next turn, max_turns, the
# user message, the turn's done field.  Turn ARGV[1] was folded into the conversation when it ended
# (``runtime.turns``); a cancelled turn the parser had not finished yet is closed here (``conv_turn``),
# so its late fold cannot land after the new user message.
_CONTINUE = """
local st = redis.call('HGET', KEYS[1], 'status')
if st ~= 'ended' and st ~= 'cancelled' then return -1 end
if redis.call('HGET', KEYS[1], 'turn') ~= ARGV[1] then return -2 end
if tonumber(redis.call('HGET', KEYS[1], 'conv_turn') or '-1') < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'conv_turn', ARGV[1])
end
redis.call('RPUSH', KEYS[2], ARGV[4])
redis.call('HSETNX', KEYS[1], ARGV[5], '0')
redis.call('HSET', KEYS[1], 'status', 'active', 'turn', ARGV[2], 'max_turns', ARGV[3])
redis.call('HDEL', KEYS[1], 'ended')
for i = 1, #KEYS do redis.call('PERSIST', KEYS[i]) end
return 1
"""

_ARRIVAL = {Arrival.DUPLICATE: "duplicate", Arrival.RECORDED: "recorded", Arrival.COMPLETED: "completed"}


class SessionOps:
    def __init__(self, cfg: Config, r: aioredis.Redis, metrics: Metrics, *, batcher: bus.Batcher | None = None,
                 live: Callable[[], frozenset[str] | None] = lambda: None) -> None:
        """``batcher``: the gateway's, so that what many requests send at once leaves in one round trip;
        ``live``: the decoders known to be alive just now, when known (``gateway.context.DecoderLimits``)."""
        self.cfg, self.r, self.metrics, self.live = cfg, r, metrics, live
        self.batcher = batcher or bus.Batcher(r)
        self.turns = Turns(r, cfg.session_ttl_s, self.batcher)
        self.sessions = self.turns.sessions
        self._continue = r.register_script(_CONTINUE)

    async def owned(self, sid: str, principal: Principal) -> SessionInfo:
        """The session ``sid`` if it exists and belongs to ``principal``; else a 404 ApiError."""
        info = await self.sessions.get(sid) if _plausible(sid) else None
        if info is None or info.key != principal.key_id:
            raise not_found(f"session {sid[:64]!r}", "session_not_found")
        return info

    async def create(self, principal: Principal, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]],
                     client_tools: list[str], params: dict[str, Any], max_turns: int, meta: dict[str, Any],
                     mode: SessionMode = SessionMode.LOOP) -> str:
        """Write a new session record (not started yet: see ``start``)."""
        sid = new_sid()
        await self.sessions.create(sid, messages, key=principal.key_id, tools=tools, params=params,
                                   max_turns=max_turns, meta=meta, client_tools=client_tools, mode=mode)
        return sid

    async def start(self, sid: str, turn: int = 0, *, route_key: str | None = None, owner: str | None = None) -> None:
        """Queue the generation of turn ``turn``: on the decoder holding its prefix (``owner``, or the
        one that ran conversations opening like ``route_key``) when it can take it, else on any."""
        await self.queue(sid, await self.route(route_key=route_key, owner=owner), turn)

    async def route(self, *, route_key: str | None = None, owner: str | None = None) -> str:
        """The job stream a turn of this conversation goes to (``runtime.routing.job_stream``)."""
        return await routing.job_stream(self.r, self.cfg, key=route_key, owner=owner, batcher=self.batcher,
                                        live=self.live())

    def settled_route(self, *, route_key: str | None = None) -> str | None:
        """``route``'s answer when it needs no lookup (``runtime.routing.settled``), else None."""
        return routing.settled(self.cfg, key=route_key, live=self.live())

    async def queue(self, sid: str, stream: str, turn: int = 0, *, one_turn: bool = False) -> None:
        """Queue the generation of turn ``turn`` on ``stream`` (``route``'s answer); ``one_turn``: a
        oneshot request's session, whose run ends with the turn."""
        self.metrics.accepted(sid, one_turn)
        await self.batcher.call(self._job(sid, stream, turn))
        log.log(logging.DEBUG if one_turn else logging.INFO, "sid=%s turn=%d queued on %s", sid, turn, stream)

    async def open(self, sid: str, principal: Principal, messages: list[dict[str, Any]], stream: str, *,
                   tools: list[dict[str, Any]], client_tools: list[str], params: dict[str, Any],
                   meta: dict[str, Any]) -> None:
        """Write a oneshot request's session (``create``, under the id ``sid``) and queue its one turn on
        ``stream``: in ONE round trip on one server, the record ahead of the job (its script sent as EVAL
        with its text, which never meets NOSCRIPT: the job never runs without it); on a cluster, whose
        pipeline may reach the job's node first, in two."""
        create = self.sessions.create_call(sid, messages, key=principal.key_id, tools=tools, params=params,
                                           max_turns=1, meta=meta, client_tools=client_tools,
                                           mode=SessionMode.ONESHOT)
        if cluster.is_cluster(self.r):
            await self.batcher.call(create)
            await self.queue(sid, stream, one_turn=True)
            return
        self.metrics.accepted(sid, True)
        for reply in await self.batcher.submit_many([create.with_text, self._job(sid, stream, 0)]):
            if isinstance(reply, Exception):
                raise reply
        log.debug("sid=%s turn=0 queued on %s", sid, stream)

    @staticmethod
    def _job(sid: str, stream: str, turn: int) -> Callable[[Any], Any]:
        return lambda p: bus.add_to(p, stream, encode(StartTurn(sid=sid, turn=turn)))

    async def read(self, sid: str, principal: Principal) -> dict[str, Any]:
        info = await self.owned(sid, principal)
        return {"id": sid, "object": "session", "status": info.status.value, "turn": info.turn,
                "max_turns": info.max_turns, "mode": info.mode.value, "oneshot": info.oneshot,
                "tools": [t.get("function", {}).get("name") for t in info.tools], "client_tools": info.client_tools,
                "messages": await self.sessions.messages(sid),
                "last_event_id": await bus.last_id(self.r, keys.events(sid))}

    async def continuable(self, sid: str, principal: Principal) -> SessionInfo:
        """The session, if a user message may continue it now: 409 for a chat-completion session or one
        still running a turn (checked before anything else about the message)."""
        info = await self.owned(sid, principal)
        if info.mode is not SessionMode.LOOP:
            raise ApiError(409, "a chat-completion session cannot be continued; send a new request",
                           code="session_oneshot")
        if info.active:
            raise ApiError(409, "the session is still running a turn; cancel it or wait for session.ended",
                           code="session_busy")
        return info

    async def add_message(self, sid: str, info: SessionInfo, content: str,
                          max_turns: int | None) -> tuple[int, str]:
        """Continue an ended or cancelled session (``info``, as ``continuable`` returned it) with a user
        message; the continue script refuses it (409) if the session changed since.

        Returns the new turn and the id of the last event before it (subscribe after it).
        """
        turn = info.turn + 1
        limit = turn + (max_turns or self.cfg.max_turns)
        after = await bus.last_id(self.r, keys.events(sid))
        await self.turns.fold(sid, info.turn, info)  # already folded when it ended, unless a cancel was first
        args = [info.turn, turn, limit, json.dumps({"role": "user", "content": content}), Field.done(info.turn)]
        ks = [keys.session(sid), keys.messages(sid), keys.tokens(sid), keys.events(sid)]
        if int(await self._continue(keys=ks, args=args)) != 1:
            raise ApiError(409, "the session changed while continuing it; retry", code="session_busy")
        await self.start(sid, turn, owner=info.owner or None)
        return turn, after

    async def tool_result(self, sid: str, principal: Principal, call_id: str, content: str, is_error: bool) -> str:
        """Record a client-side tool's result: "recorded", "completed" (the turn continues) or "duplicate"."""
        info = await self.owned(sid, principal)
        try:
            arrival = await submit_client_result(self.turns, sid, call_id, content, is_error)
        except ClientResultError as exc:
            if not info.active:
                raise ApiError(409, f"session is {info.status}, not waiting for tool results",
                               code="session_not_active") from None
            raise ApiError(400, str(exc), param="tool_call_id", code="invalid_tool_call_id") from None
        return _ARRIVAL[arrival]

    async def cancel(self, sid: str, principal: Principal) -> str:
        """Cancel the session's running turn (idempotent); returns the session's status."""
        info = await self.owned(sid, principal)
        if info.active:
            await self.cancel_unchecked(sid, info.turn)
            log.info("sid=%s turn=%d cancelled by the client", sid, info.turn)
        return await self.sessions.field(sid, "status") or Status.CANCELLED.value

    async def cancel_unchecked(self, sid: str, turn: int) -> None:
        """End the session with reason "cancelled"; its decoder aborts the turn when it next checks."""
        await self.turns.end(sid, turn, "cancelled")


def _plausible(sid: str) -> bool:
    return 0 < len(sid) <= 64 and sid.isalnum()
