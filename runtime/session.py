"""The session record and the atomic steps on it, each one Lua script over one session's keys.

Session hash ``ts:s:{sid}`` fields (spelled only here: ``Field``)::

    status        Status: active | ended | cancelled   turn        last turn started
    mode          SessionMode                          key         owner API-key hash
    owner         decoder holding the KV               tools       JSON list of OpenAI tool dicts
    params        JSON sampling params                 max_turns   int
    meta          JSON engine extras (replay script)   client_tools JSON list of client tool names
    claim:{T}     decoder generating turn T            att:{T}     attempts of turn T so far
    done:{T}      turn T fully generated (decoder)     asst:{T}    turn T's assistant message (parser)
    conv_turn     last turn whose messages are in ``ts:s:{sid}:msgs``
    pseq:{T}:{A}  last parser event seq published by an ordered publish (calls, the turn's end)
                  for turn T attempt A; the per-token ones are found in the log (dseq: the decoder's)
    err:{T}       an error event was published for turn T
    end:{T}       ``session.ended`` was published for turn T (the first ending of a turn wins)

One writer per fact: the gateway creates the record and continues it; the decoder claims turns
and marks them generated; the parser records each turn's assistant message once (``asst:{T}``,
from the same parse the client saw); the conversation list is appended only by ``runtime.turns``
(a turn's fold: ``_FOLD``, alone or in the ending's script).  Nothing is published for a turn
after its ``session.ended``: every publishing script checks ``end:{T}``; the parser's per-token
events, plain XADDs (``append_call``), are dropped by readers when they land after it.  Every
script touches only keys with the same ``{sid}`` hash tag (one cluster slot).
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import redis.asyncio as aioredis

from runtime import bus
from schemas import keys
from schemas.codec import event_envelope


class Status(enum.StrEnum):
    ACTIVE = "active"
    ENDED = "ended"
    CANCELLED = "cancelled"


class SessionMode(enum.StrEnum):
    """What happens to a turn's tool calls."""

    LOOP = "loop"  # session API: server tools run, client tools wait for results posted to the session
    ONESHOT = "oneshot"  # chat completions, Messages: one turn, every call returned to the caller
    RETURN_CALLS = "return_calls"  # Responses: server tools run and the loop goes on; a turn that calls
    # a client tool ends the session (reason "tool_calls") once its server calls have results


class Claim(enum.IntEnum):
    """How a claim of a turn went (``Sessions.claim_turn``)."""

    CLAIMED = 1
    DONE = -1  # the turn was already generated
    HELD_BY_ME = -2  # we hold it already: a duplicate job
    HELD_BY_OTHER = -3  # another decoder holds it
    INACTIVE = -4  # the session is not active (ended, cancelled) or gone: nothing to generate


class Claimed(NamedTuple):
    claim: Claim
    attempt: int = 0  # >= 1 when CLAIMED


class Field:
    """Names of the session hash's per-turn fields."""

    @staticmethod
    def claim(turn: int) -> str:
        return f"claim:{turn}"

    @staticmethod
    def done(turn: int) -> str:
        return f"done:{turn}"

    @staticmethod
    def message(turn: int) -> str:
        return f"asst:{turn}"

    @staticmethod
    def parser_seq(turn: int, attempt: int) -> str:
        return f"pseq:{turn}:{attempt}"

    @staticmethod
    def decoder_seq(turn: int, attempt: int) -> str:
        return f"dseq:{turn}:{attempt}"

    @staticmethod
    def error(turn: int) -> str:
        return f"err:{turn}"

    @staticmethod
    def ended(turn: int) -> str:
        return f"end:{turn}"

    @staticmethod
    def attempts(turn: int) -> str:
        return f"att:{turn}"


# claim turn T for ME: 1st claim, or take over from a holder we were told is dead; never on a
# session that is not active (a missing one included: no record is created).  ARGV: T, ME, the dead
# holder, then T's claim, done and attempts fields (``_claim_args``).
_CLAIM = """
if redis.call('HGET', KEYS[1], 'status') ~= 'active' then return -4 end
local holder = redis.call('HGET', KEYS[1], ARGV[4])
if redis.call('HEXISTS', KEYS[1], ARGV[5]) == 1 then return -1 end
if (not holder) or holder == ARGV[3] then
  redis.call('HSET', KEYS[1], ARGV[4], ARGV[2], 'owner', ARGV[2], 'turn', ARGV[1])
  return redis.call('HINCRBY', KEYS[1], ARGV[6], 1)
end
if holder == ARGV[2] then return -2 end
return -3
"""


def _claim_args(turn: int, me: str, dead_holder: str) -> list[Any]:
    return [turn, me, dead_holder, Field.claim(turn), Field.done(turn), Field.attempts(turn)]


# append turn ARGV[turn]'s conversation entries ARGV[first..last] once (``conv_turn``): shared by
# ``_APPEND`` and ``_END``, so the conversation has one spelling of its exactly-once append.
_FOLD = """
local function fold(rec, msgs, turn, first, last)
  if tonumber(redis.call('HGET', rec, 'conv_turn') or '-1') >= turn then return 0 end
  for i = first, last do redis.call('RPUSH', msgs, ARGV[i]) end
  redis.call('HSET', rec, 'conv_turn', turn)
  return 1
end
"""

# KEYS: record, conversation.  ARGV: turn, then its entries.
_APPEND = _FOLD + "return fold(KEYS[1], KEYS[2], tonumber(ARGV[1]), 2, #ARGV)\n"

# XADD events whose seq is beyond what this (turn, attempt, src) already published, unless the
# turn's session.ended is out.  ARGV: cursor field, maxlen, end field, then (seq, data) pairs.
_PUBLISH = """
local marks = redis.call('HMGET', KEYS[1], ARGV[3], ARGV[1])
if marks[1] then return -1 end
local cur = tonumber(marks[2] or '-1')
local last = cur
for i = 4, #ARGV, 2 do
  local seq = tonumber(ARGV[i])
  if seq > last then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'd', ARGV[i + 1])
    last = seq
  end
end
if last > cur then redis.call('HSET', KEYS[1], ARGV[1], last) end
return last
"""

# create the record (ARGV[1] field/value pairs follow) and its first messages (the rest of ARGV).
_CREATE = """
local n = tonumber(ARGV[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 2, 1 + 2 * n))
for i = 2 + 2 * n, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
return 1
"""

# append the turn's end to its token log and mark the turn generated (ARGV: maxlen, entry, done field, attempt).
_END_TURN = """
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'd', ARGV[2])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
return 1
"""

# fold turn T's entries (ARGV from ``first``, when given) once, then publish its session.ended once, set
# the final status with it and give every key of the session a TTL (first ending wins: a cancel is not
# overwritten by the aborted turn's own ending): shared by ``_END`` and ``_END_TEXT``.  KEYS:
# ``keys.session_keys`` (record, conversation, tokens, events, barriers).  ARGV from ``at``: end field,
# maxlen, data, status, time, ttl (0: none).
_ENDING = _FOLD + """
local function ending(turn, at, first)
  if #ARGV >= first then fold(KEYS[1], KEYS[2], turn, first, #ARGV) end
  if redis.call('HEXISTS', KEYS[1], ARGV[at]) == 1 then return 0 end
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[at + 1], '*', 'd', ARGV[at + 2])
  redis.call('HSET', KEYS[1], ARGV[at], '0', 'status', ARGV[at + 3], 'ended', ARGV[at + 4])
  local ttl = tonumber(ARGV[at + 5])
  if ttl > 0 then
    for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], ttl) end
  end
  return 1
end
"""

# ARGV: T, then ``ending``'s from 2, then T's entries from 8.
_END = _ENDING + "return ending(tonumber(ARGV[1]), 2, 8)\n"

# a text-only turn's end (``Sessions.end_text_call``), all of it or nothing: unless a newer attempt
# holds the turn, mark it generated and record its message; publish its turn.ended beyond the
# attempt's mark unless the session ended; then ``ending``.  ARGV: T, attempt, attempts field, done
# field, message field, message, mark field, seq, turn.ended, then ``ending``'s from 10, then T's
# entries from 16.
_END_TEXT = _ENDING + """
if redis.call('HGET', KEYS[1], ARGV[3]) ~= ARGV[2] then return -1 end
redis.call('HSET', KEYS[1], ARGV[4], ARGV[2], ARGV[5], ARGV[6])
if redis.call('HEXISTS', KEYS[1], ARGV[10]) == 0
    and tonumber(ARGV[8]) > tonumber(redis.call('HGET', KEYS[1], ARGV[7]) or '-1') then
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[11], '*', 'd', ARGV[9])
  redis.call('HSET', KEYS[1], ARGV[7], ARGV[8])
end
return ending(tonumber(ARGV[1]), 10, 16)
"""


@dataclass(frozen=True)
class SessionInfo:
    sid: str
    status: Status
    turn: int
    owner: str
    key: str
    max_turns: int
    tools: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    client_tools: list[str] = field(default_factory=list)  # calls of these go to the client
    mode: SessionMode = SessionMode.LOOP

    @property
    def oneshot(self) -> bool:
        return self.mode is SessionMode.ONESHOT

    @property
    def active(self) -> bool:
        return self.status is Status.ACTIVE

    @property
    def may_call(self) -> bool:
        """Whether a turn of this session may call a tool: it offers tools, or its client posts results."""
        return bool(self.tools) or self.mode is SessionMode.LOOP

    def tool_names(self) -> set[str]:
        return {(t.get("function") or t).get("name", "") for t in self.tools}

    def is_client_tool(self, name: str) -> bool:
        return self.oneshot or name in self.client_tools


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else ("" if x is None else str(x))


def _info(sid: str, h: list[Any]) -> SessionInfo | None:
    """A session's record from the HMGET of ``_RECORD``; None when there is none."""
    if h[0] is None:
        return None
    return SessionInfo(sid, Status(_s(h[0])), int(h[1] or 0), _s(h[2]), _s(h[3]), int(h[4] or 8),
                       json.loads(h[5] or "[]"), json.loads(h[6] or "{}"), json.loads(h[7] or "{}"),
                       json.loads(h[8] or "[]"), SessionMode(_s(h[9]) or SessionMode.LOOP))


class TurnStart(NamedTuple):
    """What ``Sessions.start_turn`` read for a decoder taking a turn job."""

    info: SessionInfo | None
    claimed: Claimed
    messages: list[dict[str, Any]]  # read after the claim
    after: str  # the token log's newest id, read after the claim


def new_sid() -> str:
    return uuid.uuid4().hex[:16]


TAKEOVER_PAGE = 256  # events read per round trip when a parser looks for what it published before
FIRST_PAGE = 8  # in its first one (the scan of a fresh turn stops at the first row: an earlier turn's event)
TAKEOVER_SCAN = 4096  # and at most this many: beyond them it trusts its mark (readers drop repeats)

_RECORD = ("status", "turn", "owner", "key", "max_turns", "tools", "params", "meta", "client_tools", "mode")


class Sessions:
    """Typed access to session records; all methods are single round trips or one script."""

    def __init__(self, r: aioredis.Redis, batcher: Any = None) -> None:
        """``batcher`` (a ``runtime.bus.Batcher``), when given, carries the hot-path event publishes and
        a new session's writes (with whatever else its caller sends in the same round trip)."""
        self.r = r
        self.batcher = batcher
        self._claim = r.register_script(_CLAIM)
        self._append = r.register_script(_APPEND)
        self._publish = r.register_script(_PUBLISH)
        self._end = r.register_script(_END)
        self._create = r.register_script(_CREATE)
        self._end_turn = r.register_script(_END_TURN)
        self._end_text = r.register_script(_END_TEXT)

    async def create(self, sid: str, messages: list[dict[str, Any]], *, key: str = "", tools: list | None = None,
                     params: dict | None = None, max_turns: int = 8, meta: dict | None = None,
                     client_tools: list[str] | None = None, mode: SessionMode = SessionMode.LOOP) -> None:
        """Write the session record and its first messages (one script)."""
        await self._send(self.create_call(sid, messages, key=key, tools=tools, params=params, max_turns=max_turns,
                                          meta=meta, client_tools=client_tools, mode=mode))

    def create_call(self, sid: str, messages: list[dict[str, Any]], *, key: str = "", tools: list | None = None,
                    params: dict | None = None, max_turns: int = 8, meta: dict | None = None,
                    client_tools: list[str] | None = None, mode: SessionMode = SessionMode.LOOP) -> bus.ScriptCall:
        """``create``'s script run, to queue on a pipeline (or a batcher's round) with other commands."""
        record = {
            "status": Status.ACTIVE.value, "turn": 0, "key": key, "max_turns": max_turns, "created": repr(time.time()),
            "tools": json.dumps(tools or []), "params": json.dumps(params or {}), "meta": json.dumps(meta or {}),
            "conv_turn": -1, "client_tools": json.dumps(client_tools or []), "mode": SessionMode(mode).value,
        }
        args: list[Any] = [len(record)]
        for name, value in record.items():
            args += [name, value]
        args += [json.dumps(m) for m in messages]
        ks = [keys.session(sid), keys.messages(sid)]  # the session's own slot
        return bus.ScriptCall(self._create, ks, args)

    async def _send(self, *writes: Callable[[Any], Any]) -> list[Any]:
        """``writes`` (each queues one command on a pipeline; a ``bus.ScriptCall`` runs its script) in ONE
        round trip, in order, and their replies: through the batcher when there is one (with whatever
        else leaves in it); else a script alone as EVALSHA (loaded on NOSCRIPT), or one pipeline whose
        scripts go as EVAL with their text (never NOSCRIPT, so a command queued behind a script never
        runs without it).  The first error is raised."""
        if self.batcher is not None:
            return list(await asyncio.gather(*(self.batcher.submit(write) for write in writes)))
        if len(writes) == 1 and isinstance(script := writes[0], bus.ScriptCall):
            return [await script.script(keys=script.keys, args=script.args)]
        pipe = self.r.pipeline(transaction=False)
        for write in writes:
            (write.with_text if isinstance(write, bus.ScriptCall) else write)(pipe)
        return await pipe.execute()

    async def get(self, sid: str) -> SessionInfo | None:
        return _info(sid, await self.r.hmget(keys.session(sid), *_RECORD))

    async def turn_record(self, sid: str, turn: int,
                          also: Callable[[Any], Any]) -> tuple[SessionInfo | None, dict[str, Any] | None, Any]:
        """The session's record (``get``) and turn ``turn``'s recorded message (``turn_message``) in
        one round trip, with the reply of the command ``also(pipe)`` queues beside them."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hmget(keys.session(sid), *_RECORD, Field.message(turn))
        also(pipe)
        h, other = await pipe.execute()
        return _info(sid, h[:-1]), None if h[-1] is None else json.loads(h[-1]), other

    async def start_turn(self, sid: str, turn: int, me: str) -> TurnStart:
        """What a decoder taking turn ``turn`` of ``sid`` needs, in ONE round trip: the session's
        record, its claim of the turn (``claim_turn``; never on a session that is not active), and,
        read after the claim, the conversation and the token log's newest id (where the turn's
        parse starts).  The reads are what ``messages`` and ``bus.last_id`` return after a claim."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hmget(keys.session(sid), *_RECORD)
        # EVAL with the script's text: never NOSCRIPT, so the reads behind it always follow a claim
        bus.ScriptCall(self._claim, [keys.session(sid)], _claim_args(turn, me, "\x00")).with_text(pipe)
        pipe.lrange(keys.messages(sid), 0, -1)
        pipe.xrevrange(keys.tokens(sid), count=1)
        h, n, msgs, rows = await pipe.execute()
        n = int(n)
        return TurnStart(_info(sid, h), Claimed(Claim.CLAIMED, n) if n > 0 else Claimed(Claim(n)),
                         [json.loads(m) for m in msgs], _s(rows[0][0]) if rows else "0-0")


    async def field(self, sid: str, name: str) -> str | None:
        v = await self.r.hget(keys.session(sid), name)
        return None if v is None else _s(v)

    async def set_fields(self, sid: str, **values: Any) -> None:
        await self.r.hset(keys.session(sid), mapping={k: v for k, v in values.items()})

    async def messages(self, sid: str) -> list[dict[str, Any]]:
        return [json.loads(m) for m in await self.r.lrange(keys.messages(sid), 0, -1)]

    async def claim_turn(self, sid: str, turn: int, me: str, dead_holder: str = "") -> Claimed:
        """Claim turn ``turn`` for decoder ``me`` (taking it over from ``dead_holder`` if given)."""
        n = int(await self._claim(keys=[keys.session(sid)], args=_claim_args(turn, me, dead_holder or "\x00")))
        return Claimed(Claim.CLAIMED, n) if n > 0 else Claimed(Claim(n))

    async def end_turn(self, sid: str, turn: int, attempt: int, token_end: bytes, maxlen: int,
                       also: Callable[[Any], Any] | None = None) -> None:
        """Append the turn's end to its token log and mark the turn generated in one script:
        apart, a redis failure between them leaves a turn the parser finished that a retried claim
        sees as unfinished (generated twice).  ``also(pipe)`` queues the caller's own commands
        behind it, in the same round trip."""
        call = bus.ScriptCall(self._end_turn, [keys.tokens(sid), keys.session(sid)],
                              [maxlen, token_end, Field.done(turn), attempt])
        await self._send(call, *([also] if also is not None else []))

    async def record_message(self, sid: str, turn: int, message: dict[str, Any]) -> None:
        """Record turn ``turn``'s assistant message (the parser's, once per turn)."""
        await self.r.hset(keys.session(sid), Field.message(turn), json.dumps(message))

    async def turn_message(self, sid: str, turn: int) -> dict[str, Any] | None:
        """Turn ``turn``'s recorded assistant message, or None when the parser has not finished it."""
        raw = await self.r.hget(keys.session(sid), Field.message(turn))
        return None if raw is None else json.loads(raw)

    async def append_turn(self, sid: str, turn: int, messages: list[dict[str, Any]]) -> bool:
        """Append turn ``turn``'s messages to the conversation once; False if already there."""
        call = self.fold_call(sid, turn, messages)
        return bool(await self._append(keys=call.keys, args=call.args))

    def fold_call(self, sid: str, turn: int, messages: list[dict[str, Any]]) -> bus.ScriptCall:
        """The script run of ``append_turn``, for a caller that sends it in its own round trip."""
        return bus.ScriptCall(self._append, [keys.session(sid), keys.messages(sid)],
                              [turn] + [json.dumps(m) for m in messages])

    def publish_call(self, sid: str, turn: int, cursor: str, items: list[tuple[int, bytes]],
                     maxlen: int) -> bus.ScriptCall:
        """The script run of ``publish_once``, for a caller that sends it in its own pipeline."""
        args: list[Any] = [cursor, maxlen, Field.ended(turn)]
        for seq, data in items:
            args += [seq, data]
        return bus.ScriptCall(self._publish, [keys.session(sid), keys.events(sid)], args)

    def append_call(self, sid: str, data: bytes, maxlen: int) -> Callable[[Any], Any]:
        """One event XADDed with no check, queued on a caller's shared round trip: the parser's
        per-token events.  Their writer keeps them once: it publishes each turn attempt's events in
        seq order and, taking a turn over, starts after what ``parser_start`` finds; readers drop what a
        stalled (not dead) parser's late writes repeat and what lands after the turn's
        ``session.ended`` (``gateway.frames.Seen``).  One command per event instead of a script
        that reads and writes the mark: the per-token commands are halved."""
        command = bus.xadd(keys.events(sid), data, maxlen)
        return lambda pipe: pipe.execute_command(*command)

    async def parser_start(self, sid: str, turn: int, attempt: int) -> tuple[int, bool]:
        """Where a parse of ``turn``'s ``attempt`` starts: the last seq the parser published for it (-1:
        none) -- its mark, written by its ordered publishes (``publish_once``), or beyond it the
        newest parser event of that attempt in the tail of the log, read back to the attempt's
        ``turn.started`` (the decoder publishes it before the attempt's first token), an earlier
        turn's event, or ``TAKEOVER_SCAN`` entries -- and whether the turn's ``session.ended`` is out."""
        _, published, ended = await self.parser_open(sid, turn, attempt, record=False)
        return published, ended

    async def parser_open(self, sid: str, turn: int, attempt: int,
                          record: bool = True) -> tuple[SessionInfo | None, int, bool]:
        """The session's record (``get``; None when ``record`` is False) and ``parser_start``'s answer,
        with the first page of its scan, in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        if record:
            pipe.hmget(keys.session(sid), *_RECORD)
        pipe.hmget(keys.session(sid), Field.parser_seq(turn, attempt), Field.ended(turn))
        pipe.xrevrange(keys.events(sid), count=FIRST_PAGE)
        *h, (mark_s, ended), rows = await pipe.execute()
        info = _info(sid, h[0]) if record else None
        return info, await self._published(sid, turn, attempt, int(mark_s or -1), rows), ended is not None

    async def _published(self, sid: str, turn: int, attempt: int, mark: int, first: list[Any]) -> int:
        """``parser_start``'s scan of the event log's tail, from its first page (``FIRST_PAGE`` rows)."""
        stream, top, scanned, rows, page = keys.events(sid), "+", 0, first, FIRST_PAGE
        while scanned < TAKEOVER_SCAN:
            if rows is None:
                rows = await self.r.xrevrange(stream, max=top, count=TAKEOVER_PAGE)
                page = TAKEOVER_PAGE
            for raw_id, fields in rows:
                env = event_envelope(fields.get(bus.FIELD, b""))
                if env is None:
                    continue
                if env.src == "parser" and (env.turn, env.attempt) == (turn, attempt):
                    return max(mark, env.seq)
                if env.turn < turn or (env.kind == "turn.started" and (env.turn, env.attempt) == (turn, attempt)):
                    return mark
            if len(rows) < page:
                return mark
            scanned += len(rows)
            top, rows = "(" + _s(rows[-1][0]), None
        return mark

    async def publish_once(self, sid: str, turn: int, cursor: str, items: list[tuple[int, bytes]],
                           maxlen: int) -> int:
        """XADD turn ``turn``'s events (seq, bytes) whose seq is beyond ``cursor``'s mark; returns the
        new mark, or -1 when the turn's ``session.ended`` is already out (nothing is published)."""
        return await self.publish(self.publish_call(sid, turn, cursor, items, maxlen))

    async def publish(self, call: bus.ScriptCall) -> int:
        """Run a ``publish_call`` on its own (through the batcher when there is one); returns the new mark."""
        [mark] = await self._send(call)
        return int(mark)

    async def record_and_publish(self, sid: str, turn: int, message: dict[str, Any], call: bus.ScriptCall) -> int:
        """``record_message`` and a ``publish_call`` (the turn's last events) in one round trip, the
        message first: whoever sees the turn's end finds its message.  Returns ``publish``'s mark."""
        data = json.dumps(message)
        _, mark = await self._send(lambda p: p.hset(keys.session(sid), Field.message(turn), data), call)
        return int(mark)

    async def end_once(self, sid: str, turn: int, data: bytes, status: Status, maxlen: int, *,
                       entries: list[dict[str, Any]] | None = None, ttl_s: int = 0) -> bool:
        """Publish turn ``turn``'s ending event and set ``status``; False if the turn already ended.
        In the same script: ``entries`` (the turn's conversation entries) are appended once, whether
        or not the turn had ended, and when it ends here every key of the session gets ``ttl_s``."""
        args = [turn, Field.ended(turn), maxlen, data, status.value, repr(time.time()), ttl_s]
        args += [json.dumps(m) for m in entries or ()]
        call = bus.ScriptCall(self._end, keys.session_keys(sid, turn + 1), args)
        [ended] = await self._send(call)  # with a batcher: with what its caller sends beside it
        return bool(ended)

    def end_text_call(self, sid: str, turn: int, attempt: int, message: dict[str, Any], seq: int,
                      turn_ended: bytes, session_ended: bytes, status: Status, maxlen: int, *,
                      entries: list[dict[str, Any]], ttl_s: int = 0) -> bus.ScriptCall:
        """The end of a turn whose decoder was its parse stage (text-only, ``runtime.turns.text_only``, or a
        content run that met no markup: ``workers.decode.content_run``), in one
        script, to queue on a pipeline with other commands: unless a newer attempt holds the turn, it is
        marked generated (as ``end_turn``), its message recorded, its ``turn.ended`` (``seq``, the parse
        stage's) published once unless the session ended, its ``entries`` folded once, and the session ended
        (as ``end_once``).  All of it or nothing: a decoder that dies between its parts cannot leave a turn
        marked generated whose session never ends.  Its reply: 1 when the session ended here, 0 when it had
        ended (a cancel came first), -1 when the attempt is not the turn's latest."""
        args = [turn, attempt, Field.attempts(turn), Field.done(turn), Field.message(turn), json.dumps(message),
                Field.parser_seq(turn, attempt), seq, turn_ended, Field.ended(turn), maxlen, session_ended,
                status.value, repr(time.time()), ttl_s]
        args += [json.dumps(m) for m in entries]
        return bus.ScriptCall(self._end_text, keys.session_keys(sid, turn + 1), args)
