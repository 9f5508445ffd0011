"""The session record and the atomic steps on it, each one Lua script over one session's keys.

Session hash ``ts:s:{sid}`` fields::

    status        active | ended | cancelled          turn        last turn started
    key           owner API-key hash                   owner       decoder holding the KV
    tools         JSON list of OpenAI tool dicts       params      JSON sampling params
    max_turns     int                                  meta        JSON engine extras (replay script)
    claim:{T}     decoder generating turn T            att:{T}     attempts of turn T so far
    done:{T}      turn T fully generated               asst:{T}    JSON assistant message of turn T
    conv_turn     last turn whose messages are in ``ts:s:{sid}:msgs``
    pseq:{T}:{A}  last parser event seq published for turn T attempt A
    end:{T}       ``session.ended`` was published for turn T (the first ending of a turn wins)

Every script touches only keys with the same ``{sid}`` hash tag (one cluster slot).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from schemas import keys
from runtime import bus

# claim turn T for ME: 1st claim, or take over from a holder we were told is dead.
_CLAIM = """
local holder = redis.call('HGET', KEYS[1], 'claim:' .. ARGV[1])
if redis.call('HEXISTS', KEYS[1], 'done:' .. ARGV[1]) == 1 then return -1 end
if (not holder) or holder == ARGV[3] then
  redis.call('HSET', KEYS[1], 'claim:' .. ARGV[1], ARGV[2], 'owner', ARGV[2], 'turn', ARGV[1])
  return redis.call('HINCRBY', KEYS[1], 'att:' .. ARGV[1], 1)
end
if holder == ARGV[2] then return -2 end
return -3
"""

# append turn T's assistant + tool messages to the conversation exactly once.
_APPEND = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'conv_turn') or '-1')
if cur >= tonumber(ARGV[1]) then return 0 end
for i = 2, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('HSET', KEYS[1], 'conv_turn', ARGV[1])
return 1
"""

# XADD events whose seq is beyond what this (turn, attempt, src) already published.
_PUBLISH = """
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1')
local last = cur
for i = 3, #ARGV, 2 do
  local seq = tonumber(ARGV[i])
  if seq > last then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'd', ARGV[i + 1])
    last = seq
  end
end
if last > cur then redis.call('HSET', KEYS[1], ARGV[1], last) end
return last
"""


# publish turn T's session.ended once and set the final status with it (first ending wins:
# a cancel is not overwritten by the aborted turn's own ending).
_END = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'd', ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], '0', 'status', ARGV[4], 'ended', ARGV[5])
return 1
"""


@dataclass(frozen=True)
class SessionInfo:
    sid: str
    status: str
    turn: int
    owner: str
    key: str
    max_turns: int
    tools: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    client_tools: list[str] = field(default_factory=list)  # calls of these go to the client
    oneshot: bool = False  # OpenAI chat completion: one turn, calls returned to the client

    def is_client_tool(self, name: str) -> bool:
        return self.oneshot or name in self.client_tools


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else ("" if x is None else str(x))


def new_sid() -> str:
    return uuid.uuid4().hex[:16]


class Sessions:
    """Typed access to session records; all methods are single round trips or one script."""

    def __init__(self, r: aioredis.Redis, batcher: Any = None) -> None:
        """``batcher`` (a ``runtime.bus.Batcher``), when given, carries the hot-path event publishes."""
        self.r = r
        self.batcher = batcher
        self._claim = r.register_script(_CLAIM)
        self._append = r.register_script(_APPEND)
        self._publish = r.register_script(_PUBLISH)
        self._end = r.register_script(_END)

    async def create(self, sid: str, messages: list[dict[str, Any]], *, key: str = "", tools: list | None = None,
                     params: dict | None = None, max_turns: int = 8, meta: dict | None = None,
                     client_tools: list[str] | None = None, oneshot: bool = False) -> None:
        """Write the session record and its first messages (one transaction), then index it as active."""
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(keys.session(sid), mapping={
            "status": "active", "turn": 0, "key": key, "max_turns": max_turns, "created": time.time(),
            "tools": json.dumps(tools or []), "params": json.dumps(params or {}), "meta": json.dumps(meta or {}),
            "conv_turn": -1, "client_tools": json.dumps(client_tools or []), "oneshot": int(oneshot),
        })
        pipe.rpush(keys.messages(sid), *[json.dumps(m) for m in messages])
        await pipe.execute()  # one slot: the session's own keys
        await self.r.zadd(keys.ACTIVE_SESSIONS, {sid: time.time()})  # a global key, another slot

    async def get(self, sid: str) -> SessionInfo | None:
        h = await self.r.hmget(keys.session(sid), "status", "turn", "owner", "key", "max_turns", "tools",
                               "params", "meta", "client_tools", "oneshot")
        if h[0] is None:
            return None
        return SessionInfo(sid, _s(h[0]), int(h[1] or 0), _s(h[2]), _s(h[3]), int(h[4] or 8),
                           json.loads(h[5] or "[]"), json.loads(h[6] or "{}"), json.loads(h[7] or "{}"),
                           json.loads(h[8] or "[]"), bool(int(h[9] or 0)))

    async def field(self, sid: str, name: str) -> str | None:
        v = await self.r.hget(keys.session(sid), name)
        return None if v is None else _s(v)

    async def set_fields(self, sid: str, **values: Any) -> None:
        await self.r.hset(keys.session(sid), mapping={k: v for k, v in values.items()})

    async def messages(self, sid: str) -> list[dict[str, Any]]:
        return [json.loads(m) for m in await self.r.lrange(keys.messages(sid), 0, -1)]

    async def add_messages(self, sid: str, messages: list[dict[str, Any]]) -> None:
        await self.r.rpush(keys.messages(sid), *[json.dumps(m) for m in messages])

    async def claim_turn(self, sid: str, turn: int, me: str, dead_holder: str = "") -> int:
        """Claim turn ``turn`` for decoder ``me``.

        Returns the attempt number (>= 1) on success, else -1 (turn already done),
        -2 (we already hold it: a duplicate job) or -3 (another decoder holds it).
        """
        return int(await self._claim(keys=[keys.session(sid)], args=[turn, me, dead_holder or "\x00"]))

    async def append_turn(self, sid: str, turn: int, messages: list[dict[str, Any]]) -> bool:
        """Append turn ``turn``'s assistant and tool messages once; False if already there."""
        args = [turn] + [json.dumps(m) for m in messages]
        return bool(await self._append(keys=[keys.session(sid), keys.messages(sid)], args=args))

    async def end_turn(self, sid: str, turn: int, attempt: int, token_end: bytes, text: str, maxlen: int) -> None:
        """Append the turn's end to its token log and record it (``asst:T``, ``done:T``) in one
        transaction: apart, a redis failure between them leaves a turn the parser finished that a
        retried claim sees as unfinished (generated twice) with no assistant text for the conversation."""
        pipe = self.r.pipeline(transaction=True)
        pipe.xadd(keys.tokens(sid), {bus.FIELD: token_end}, maxlen=maxlen, approximate=True)
        pipe.hset(keys.session(sid), mapping={f"asst:{turn}": json.dumps({"raw": text}), f"done:{turn}": attempt})
        await pipe.execute()

    async def publish_once(self, sid: str, cursor: str, items: list[tuple[int, bytes]], maxlen: int) -> int:
        """XADD the events (seq, bytes) whose seq is beyond ``cursor``'s mark; returns the new mark."""
        args: list[Any] = [cursor, maxlen]
        for seq, data in items:
            args += [seq, data]
        script_keys = [keys.session(sid), keys.events(sid)]
        if self.batcher is None:
            return int(await self._publish(keys=script_keys, args=args))
        return int(await self.batcher.call(lambda pipe: self._publish(keys=script_keys, args=args, client=pipe)))

    async def end_once(self, sid: str, turn: int, data: bytes, status: str, maxlen: int) -> bool:
        """Publish turn ``turn``'s ending event and set ``status``; False if the turn already ended."""
        args = [f"end:{turn}", maxlen, data, status, repr(time.time())]
        return bool(await self._end(keys=[keys.session(sid), keys.events(sid)], args=args))


async def end_session(sessions: Sessions, sid: str, turn: int, reason: str, content: str = "",
                      ttl_s: int = 3600) -> None:
    """Publish ``session.ended`` once per turn, mark the record ended and let its keys expire.

    The first ending of a turn wins: a cancel is not overwritten by the aborted turn's own end.
    A continued session (a new user message) ends again at a later turn.
    """
    from schemas.codec import encode
    from schemas.events import Event, SessionEnded
    from runtime import bus

    ev = Event(sid=sid, turn=turn, attempt=0, seq=0, src="session", ts=time.time(),
               body=SessionEnded(reason=reason, content=content))
    status = "cancelled" if reason == "cancelled" else "ended"
    if not await sessions.end_once(sid, turn, encode(ev), status, bus.EVENT_STREAM_MAXLEN):
        return
    await sessions.r.zrem(keys.ACTIVE_SESSIONS, sid)
    await bus.expire_session(sessions.r, sid, turn + 1, ttl_s)


async def fail_session(sessions: Sessions, entry: Any, message: str, ttl_s: int = 3600,
                       code: str = "worker_error") -> None:
    """A job of this session failed for good: tell the client (an ``error`` event with ``code``)
    and end the session (others go on)."""
    from schemas.codec import UndecodableEntry, decode_job, encode
    from schemas.events import ErrorEvent, Event
    from runtime import bus

    try:
        job = decode_job(entry.data)
    except UndecodableEntry:
        return  # no session to tell
    turn = getattr(job, "turn", 0)
    ev = Event(sid=job.sid, turn=turn, attempt=0, seq=0, src="error", ts=time.time(),
               body=ErrorEvent(message=message[:2000], code=code))
    await sessions.publish_once(job.sid, f"err:{turn}", [(0, encode(ev))], bus.EVENT_STREAM_MAXLEN)
    await end_session(sessions, job.sid, turn, "error", ttl_s=ttl_s)
