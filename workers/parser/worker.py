"""The parser worker shell: tail a turn's token log, publish typed events, dispatch calls.

One ``ParseTurn`` job per (turn, attempt).  The token log is the log of the turn: a parser
that takes a job over (``XAUTOCLAIM``) replays the turn from its start; the parse is
deterministic, and events are published through a per-(turn, attempt) seq mark, so the
client sees every event exactly once.  Each call is enqueued on its tool pool the moment
it is ready (arq job id ``{sid}:{turn}:{index}``: a replay cannot enqueue it twice).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import redis.asyncio as aioredis

from schemas import keys
from schemas.codec import UndecodableEntry, decode_job, decode_token, encode
from schemas.events import (Event, ParseTurn, TokenChunk, TokenEnd, ToolCallInvalid, ToolCallReady, TurnEnded,
                            call_id_prefix)
from runtime import bus
from runtime.barrier import Arrival, Barrier, complete_turn
from runtime.config import Config
from runtime.config import default_worker_id
from workers.parser import make_parser
from runtime.session import Sessions, end_session, fail_session
from workers.tools.dispatch import Dispatcher

log = logging.getLogger(__name__)


class TurnSuperseded(Exception):
    """A newer attempt of the turn exists: this job's attempt is abandoned."""


class ParserWorker:
    def __init__(self, cfg: Config, r: aioredis.Redis, dispatcher: Dispatcher) -> None:
        self.cfg, self.r, self.dispatcher = cfg, r, dispatcher
        self.me = cfg.worker_id or default_worker_id("parser")
        self.sessions = Sessions(r, batcher=bus.Batcher(r))  # one round trip for many sessions' events
        self.barrier = Barrier(r, cfg.session_ttl_s)
        self.reader = bus.GroupReader(r, [keys.PARSE_JOBS], keys.PARSE_GROUP, self.me, count=16,
                                      block_ms=cfg.block_ms)
        self.inflight: dict[str, bus.Entry] = {}
        self._tasks: set[asyncio.Task] = set()

    async def run(self, stop: asyncio.Event) -> None:
        await self.reader.setup()
        loops = [asyncio.create_task(self._job_loop()), asyncio.create_task(self._reclaim_loop())]
        log.info("parser worker %s up", self.me)
        await stop.wait()
        for t in loops + list(self._tasks):
            t.cancel()
        await asyncio.gather(*loops, *self._tasks, return_exceptions=True)

    async def _job_loop(self) -> None:
        while True:
            try:
                for entry in await self.reader.read():
                    self._spawn(entry)
            except (aioredis.ConnectionError, aioredis.TimeoutError) as exc:
                log.warning("parser %s: redis unavailable (%s); retrying", self.me, exc)
                await asyncio.sleep(0.5)

    async def _reclaim_loop(self) -> None:
        while True:
            await asyncio.sleep(max(0.2, self.cfg.reclaim_idle_ms / 2000))
            try:
                await self._renew_leases()
                for entry in await self.reader.reclaim(self.cfg.reclaim_idle_ms):
                    log.info("parser %s: took over parse job %s", self.me, entry.id)
                    self._spawn(entry)
            except (aioredis.ConnectionError, aioredis.TimeoutError) as exc:
                log.warning("parser %s: reclaim failed: %s", self.me, exc)

    async def _renew_leases(self) -> None:
        ids = list(self.inflight)
        if ids:
            await self.r.xclaim(keys.PARSE_JOBS, keys.PARSE_GROUP, self.me, 0, ids, justid=True)

    def _spawn(self, entry: bus.Entry) -> None:
        if entry.id in self.inflight:
            return
        self.inflight[entry.id] = entry
        task = asyncio.create_task(self._handle(entry))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, entry: bus.Entry) -> None:
        try:
            job = decode_job(entry.data)
            if not isinstance(job, ParseTurn):
                raise UndecodableEntry(f"not a parse job: {type(job).__name__}")
            await TurnParse(self, job).run()
            await self.reader.ack(entry)
        except TurnSuperseded:
            await self.reader.ack(entry)
        except UndecodableEntry as exc:
            await bus.dead_letter(self.r, entry, str(exc), keys.PARSE_GROUP)
        except asyncio.CancelledError:
            raise
        except (aioredis.ConnectionError, aioredis.TimeoutError) as exc:
            log.warning("parser %s: job %s interrupted by redis (%s); left pending for a retry", self.me, entry.id, exc)
        except Exception as exc:  # outermost boundary: log, dead-letter, go on
            log.exception("parser %s: job %s failed", self.me, entry.id)
            await bus.dead_letter(self.r, entry, f"{type(exc).__name__}: {exc}", keys.PARSE_GROUP)
            await fail_session(self.sessions, entry, f"parse failed: {type(exc).__name__}: {exc}",
                               self.cfg.session_ttl_s)
        finally:
            self.inflight.pop(entry.id, None)


class TurnParse:
    """The parse of one turn attempt: token log in, events and dispatches out."""

    def __init__(self, w: ParserWorker, job: ParseTurn) -> None:
        self.w, self.job = w, job
        self.sid, self.turn, self.attempt = job.sid, job.turn, job.attempt
        self.seq = 0
        self.n_calls = 0
        self.content: list[str] = []
        self.cursor = f"pseq:{self.turn}:{self.attempt}"

    async def run(self) -> None:
        info = await self.w.sessions.get(self.sid)
        if info is None:
            return
        self.info = info
        self.parser = make_parser(self.w.cfg.tool_format, tools=info.tools or None,
                                  reasoning=self.w.cfg.reasoning or None, call_id_prefix=call_id_prefix(self.turn))
        self.deferred: list[ToolCallReady | ToolCallInvalid] = []
        self.published = int(await self.w.sessions.field(self.sid, self.cursor) or -1)
        after = self.job.after
        while True:
            for entry in await bus.tail(self.w.r, keys.tokens(self.sid), after, block_ms=self.w.cfg.block_ms):
                after = entry.id
                if await self._on_entry(entry):
                    return

    async def _on_entry(self, entry: bus.Entry) -> bool:
        """Handle one token-log entry; True when the turn is over."""
        try:
            tok = decode_token(entry.data)
        except UndecodableEntry as exc:
            await bus.dead_letter(self.w.r, entry, str(exc))
            return False
        if tok.turn != self.turn or tok.attempt < self.attempt:
            return False
        if tok.attempt > self.attempt:
            raise TurnSuperseded()
        if isinstance(tok, TokenChunk):
            await self._emit(self.parser.feed(tok.text), t0=tok.t_emit)
            return False
        await self._end(tok)
        return True

    async def _emit(self, bodies: list[Any], t0: float = 0.0) -> None:
        items: list[tuple[int, bytes]] = []
        calls: list[ToolCallReady | ToolCallInvalid] = []
        for body in bodies:
            self.seq += 1
            if body.__class__.__name__ == "ContentDelta":
                self.content.append(body.text)
            if isinstance(body, (ToolCallReady, ToolCallInvalid)):
                calls.append(body)
            ev = Event(sid=self.sid, turn=self.turn, attempt=self.attempt, seq=self.seq, src="parser",
                       ts=time.time(), body=body, t0=t0)
            items.append((self.seq, encode(ev)))
        await self._await_client(calls)  # before the client can see them and post results
        if items and items[-1][0] > self.published:
            self.published = await self.w.sessions.publish_once(self.sid, self.cursor, items, bus.EVENT_STREAM_MAXLEN)
        self.n_calls += len(calls)
        if self.w.cfg.dispatch == "after_turn":
            self.deferred += calls
        else:
            await self._dispatch(calls)

    def _is_client_call(self, call: ToolCallReady | ToolCallInvalid) -> bool:
        return isinstance(call, ToolCallReady) and self.info.is_client_tool(call.name)

    async def _await_client(self, calls: list[ToolCallReady | ToolCallInvalid]) -> None:
        """Mark client-side calls pending: the client runs them and posts results (workers.tools.client)."""
        for call in calls:
            if self._is_client_call(call):
                await self.w.barrier.awaiting_client(self.sid, self.turn, call.index, call.id, call.name,
                                                      call.arguments)

    async def _dispatch(self, calls: list[ToolCallReady | ToolCallInvalid]) -> None:
        for call in calls:
            if not self._is_client_call(call) and not self.info.oneshot:
                await self.w.dispatcher.dispatch(self.sid, self.turn, self.attempt, call)

    async def _end(self, end: TokenEnd) -> None:
        await self._emit(self.parser.finish())
        await self._dispatch(self.deferred)
        await self._emit([TurnEnded(finish_reason=self._finish_reason(end), completion_tokens=end.completion_tokens,
                                    n_calls=self.n_calls)])
        log.info("sid=%s turn=%d attempt=%d parsed: %d calls, %s", self.sid, self.turn, self.attempt,
                 self.n_calls, end.finish_reason)
        if self.n_calls == 0 or self.info.oneshot:
            reason = self._finish_reason(end)
            await end_session(self.w.sessions, self.sid, self.turn, reason, "".join(self.content),
                              self.w.cfg.session_ttl_s)
            return
        if await self.w.barrier.turn_end(self.sid, self.turn, self.n_calls) == Arrival.COMPLETED:
            await complete_turn(self.w.barrier, self.w.sessions, self.sid, self.turn)

    def _finish_reason(self, end: TokenEnd) -> str:
        if end.finish_reason == "length":
            return "length"
        return "tool_calls" if self.n_calls else end.finish_reason
