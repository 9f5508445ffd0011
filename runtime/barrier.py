"""The turn's fan-in barrier and the continuation it triggers (DESIGN §3.5).

One Lua script over the session's own keys (barrier hash + event stream, one slot) records
each arrival -- a tool result or the parser's turn end -- and answers COMPLETED to exactly
one caller: the one whose arrival makes ``results == n_calls`` with the count known.  That
caller sends ``ContinueTurn(sid, turn)``; if it dies before sending, the sweep finds the
barrier ``done`` but not ``sent`` and sends it.  Decoders drop duplicate continuations
(the turn claim in ``runtime.session``), so a double send is harmless.

Barrier hash ``ts:s:{sid}:t:{turn}:bar``::

    n        number of calls of the turn (written once, by the parser at turn end)
    nres     results recorded so far       r:{i}   result JSON of call i (first write wins)
    s:{i}    call i started                c:{i}   call i went to the client ({t, id, name})
    done     completion time               sent    continuation sent

The script's result and start events are published only while the turn's ``session.ended`` is
not out (a cancel while a tool runs: its result is recorded, but the client sees nothing after
the ending).  Redis Cluster: the script's KEYS are the barrier hash, the session's event
stream and its record, all tagged ``{sid}``; ``send_continuation`` and the client-call helpers
are plain commands.

The sweep's index (``keys.WAITING_TURNS``, a global key): a turn joins it when its end is recorded
(``turn_end``, in the same round trip as the script) and leaves it when the sweep reads its barrier
``sent`` (or long gone), or when its session is stopped (``Turns``).  So a sweep pass reads the
turns waiting for results or for their continuation, not every session that is generating.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from enum import IntEnum
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from schemas import keys
from schemas.codec import encode
from schemas.events import ContinueTurn
from runtime import bus
from runtime.session import Field

log = logging.getLogger(__name__)

_BARRIER = """
local op = ARGV[1]
local live = redis.call('HEXISTS', KEYS[3], ARGV[8]) == 0
if op == 'started' then
  if redis.call('HEXISTS', KEYS[1], 'r:' .. ARGV[2]) == 1 then return -1 end
  if redis.call('HSETNX', KEYS[1], 's:' .. ARGV[2], ARGV[3]) == 0 then return 0 end
  if live and ARGV[4] ~= '' then redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', 'd', ARGV[4]) end
  redis.call('EXPIRE', KEYS[1], ARGV[6])
  return 1
end
if op == 'result' then
  if redis.call('HSETNX', KEYS[1], 'r:' .. ARGV[2], ARGV[3]) == 0 then return 0 end
  redis.call('HINCRBY', KEYS[1], 'nres', 1)
  if live and ARGV[4] ~= '' then redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', 'd', ARGV[4]) end
elseif op == 'end' then
  if redis.call('HSETNX', KEYS[1], 'n', ARGV[2]) == 0 then return 0 end
end
redis.call('EXPIRE', KEYS[1], ARGV[6])
local n = redis.call('HGET', KEYS[1], 'n')
if n and tonumber(redis.call('HGET', KEYS[1], 'nres') or '0') >= tonumber(n) then
  if redis.call('HSETNX', KEYS[1], 'done', ARGV[7]) == 1 then return 2 end
end
return 1
"""


_FORGET_UNCHANGED = """
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then redis.call('ZREM', KEYS[1], ARGV[i]) end
end
return 1
"""


class Arrival(IntEnum):
    DUPLICATE = 0
    RECORDED = 1
    COMPLETED = 2  # this caller completed the turn: it must send the continuation


class Start(IntEnum):
    HAS_RESULT = -1  # the call already has a result: a duplicate delivery, do nothing
    AGAIN = 0  # started before (a re-delivered job): run it again only if that is safe
    FIRST = 1


class Barrier:
    """Atomic arrivals on one turn's barrier, and the continuation send."""

    def __init__(self, r: aioredis.Redis, ttl_s: int = 3600) -> None:
        self.r = r
        self.ttl_s = ttl_s
        self._script = r.register_script(_BARRIER)
        self._forget_unchanged = r.register_script(_FORGET_UNCHANGED)

    def _run(self, sid: str, turn: int, op: str, a: Any, payload: str = "", event: bytes = b"") -> bus.ScriptCall:
        args = [op, a, payload, event, bus.EVENT_STREAM_MAXLEN, self.ttl_s, repr(time.time()), Field.ended(turn)]
        return bus.ScriptCall(self._script, [keys.barrier(sid, turn), keys.events(sid), keys.session(sid)], args)

    async def _call(self, sid: str, turn: int, op: str, a: Any, payload: str = "", event: bytes = b"") -> int:
        run = self._run(sid, turn, op, a, payload, event)
        return int(await self._script(keys=run.keys, args=run.args))

    async def start(self, sid: str, turn: int, index: int, event: bytes = b"") -> Start:
        """Mark call ``index`` started, publishing ``event`` the first time (one round trip)."""
        return Start(await self._call(sid, turn, "started", index, "1", event))

    async def result(self, sid: str, turn: int, index: int, result: dict[str, Any], event: bytes = b"") -> Arrival:
        """Record call ``index``'s result and publish its event, exactly once."""
        return Arrival(await self._call(sid, turn, "result", index, json.dumps(result), event))

    async def turn_end(self, sid: str, turn: int, n_calls: int) -> Arrival:
        """Record that turn ``turn`` produced ``n_calls`` calls awaiting results, indexing the turn for
        the sweep (``keys.WAITING_TURNS``) in the same round trip (on one server just before the
        script; on a cluster the two nodes' commands leave side by side): from then until its barrier
        says ``sent``, a completer that dies before sending the continuation is covered.  A parser that
        dies before both were written leaves its parse job unacknowledged: the parser that takes it
        over records the turn's end again, and indexes it again."""
        run = self._run(sid, turn, "end", n_calls)
        pipe = self.r.pipeline(transaction=False)  # the index is a global key: another slot
        _index(pipe, sid, turn)
        run(pipe)
        indexed, arrival = await pipe.execute(raise_on_error=False)
        if isinstance(arrival, NoScriptError):  # the server lost its scripts: loaded and run again
            arrival = await self._script(keys=run.keys, args=run.args)
        elif isinstance(arrival, Exception):
            raise arrival
        if isinstance(indexed, Exception):  # the index's node failed (a cluster: another node): the end is
            await self._index_again(sid, turn, indexed)  # recorded, its answer must not be lost
        return Arrival(int(arrival))

    async def _index_again(self, sid: str, turn: int, exc: Exception) -> None:
        try:
            await _index(self.r, sid, turn)
        except Exception as again:  # the completer continues the turn; only its death is not covered
            log.warning("sid=%s turn=%d not indexed for the sweep: %s; %s", sid, turn, exc, again)

    async def results(self, sid: str, turn: int) -> list[dict[str, Any]]:
        """The recorded results of a turn, by call index."""
        return results_in(await self.read(sid, turn)(self.r))

    @staticmethod
    def read(sid: str, turn: int) -> Callable[[Any], Any]:
        """The read of a turn's barrier hash, on a client (a coroutine) or queued on a pipeline; its
        reply's results: ``results_in``."""
        return lambda r: r.hgetall(keys.barrier(sid, turn))

    async def awaiting_client(self, sid: str, turn: int, index: int, call_id: str, name: str,
                              arguments: str = "{}") -> None:
        """Call ``index`` went to the client; the sweep times it out if no result comes."""
        pending = json.dumps({"t": time.time(), "id": call_id, "name": name, "arguments": arguments})
        await self.r.hsetnx(keys.barrier(sid, turn), f"c:{index}", pending)

    async def client_call(self, sid: str, turn: int, index: int) -> dict[str, Any] | None:
        """The pending client-side call ``index`` ({t, id, name, arguments}), or None."""
        raw = await self.r.hget(keys.barrier(sid, turn), f"c:{index}")
        return None if raw is None else json.loads(raw)

    async def overdue_client_calls(self, sid: str, turn: int, timeout_s: float) -> list[int]:
        """Client-side calls of a turn still without a result after ``timeout_s``."""
        return overdue_calls(await self.r.hgetall(keys.barrier(sid, turn)), time.time(), timeout_s)

    async def waiting(self) -> list[tuple[bytes, float]]:
        """The sweep's index: every turn that ended with calls and was not yet seen ``sent``, with
        the time it was indexed."""
        return await self.r.zrange(keys.WAITING_TURNS, 0, -1, withscores=True)

    async def forget(self, *members: bytes | str) -> None:
        """Drop turns from the sweep's index (their continuation was sent, or they need none)."""
        if members:
            await self.r.zrem(keys.WAITING_TURNS, *members)

    async def forget_unchanged(self, members: list[tuple[bytes, float]]) -> None:
        """Drop these (member, score) pairs from the sweep's index unless a turn end indexed the member
        again since it was read (a new score): one script on the index's own key."""
        if members:
            args = [x for member, score in members for x in (member, repr(score))]
            await self._forget_unchanged(keys=[keys.WAITING_TURNS], args=args)

    async def states(self, turns: list[tuple[str, int]]) -> list[dict[bytes, bytes]]:
        """The barrier hashes of many (sid, turn), in one round trip (for the sweep)."""
        pipe = self.r.pipeline(transaction=False)
        for sid, turn in turns:
            pipe.hgetall(keys.barrier(sid, turn))
        return await pipe.execute() if turns else []

    async def has_result(self, sid: str, turn: int, index: int) -> bool:
        return bool(await self.r.hexists(keys.barrier(sid, turn), f"r:{index}"))

    async def send_continuation(self, sid: str, turn: int, owner: str | None = None,
                                first: bus.ScriptCall | None = None) -> str:
        """Enqueue ``ContinueTurn`` to the KV-holding decoder if alive, else the shared queue.
        ``owner``: the session's decoder as the caller just read it (else it is read here);
        ``first``: a script that must run before the job is queued (the turn's fold), sent in the
        round trip that checks the owner's heartbeat."""
        if owner is None:
            owner = (await self.r.hget(keys.session(sid), "owner") or b"").decode()
        pipe = self.r.pipeline(transaction=False)
        if first is not None:
            first.with_text(pipe)  # never NOSCRIPT: the heartbeat's reply never comes without it
        if owner:
            pipe.exists(keys.decoder_heartbeat(owner))
        replies = await pipe.execute()  # an empty pipeline sends nothing
        stream = keys.decoder_jobs(owner) if owner and replies[-1] else keys.DECODE_JOBS
        await bus.add(self.r, stream, encode(ContinueTurn(sid=sid, turn=turn)))
        await self.mark_sent(sid, turn)
        log.info("sid=%s turn=%d continuation -> %s", sid, turn, stream)
        return stream

    async def mark_sent(self, sid: str, turn: int) -> None:
        """The turn needs no continuation (the session ended with it): the sweep leaves it alone."""
        await self.r.hset(keys.barrier(sid, turn), "sent", repr(time.time()))

    async def unsent(self, sid: str, turn: int, older_than_s: float) -> bool:
        """True when the turn completed more than ``older_than_s`` ago but no continuation was sent."""
        done, sent = await self.r.hmget(keys.barrier(sid, turn), "done", "sent")
        return unsent_in({b"done": done, b"sent": sent}, time.time(), older_than_s)



def _index(target: Any, sid: str, turn: int) -> Any:
    """Index turn ``turn`` for the sweep (``keys.WAITING_TURNS``), on a client (awaitable) or a pipeline."""
    return target.zadd(keys.WAITING_TURNS, {keys.waiting_turn(sid, turn): time.time()})


def results_in(h: dict[bytes, bytes]) -> list[dict[str, Any]]:
    """The recorded results in barrier hash ``h``, by call index."""
    rows = [(int(k[2:]), json.loads(v)) for k, v in ((k.decode(), v) for k, v in h.items()) if k.startswith("r:")]
    return [v for _, v in sorted(rows, key=lambda kv: kv[0])]


def overdue_calls(state: dict[bytes, bytes], now: float, timeout_s: float) -> list[int]:
    """The client-side calls in barrier hash ``state`` still without a result after ``timeout_s``."""
    return [int(k[2:]) for k, v in state.items()
            if k.startswith(b"c:") and b"r:" + k[2:] not in state and now - json.loads(v)["t"] > timeout_s]


def unsent_in(state: dict[bytes, Any], now: float, older_than_s: float) -> bool:
    """Whether barrier hash ``state`` completed more than ``older_than_s`` ago without its continuation sent."""
    done = state.get(b"done")
    return done is not None and state.get(b"sent") is None and now - float(done) > older_than_s
