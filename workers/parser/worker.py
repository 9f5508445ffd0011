"""The parser worker shell: tail a turn's token log, publish typed events, dispatch calls.

One ``ParseTurn`` job per (turn, attempt), consumed by ``runtime.consumer.Consumer``.  The token
log is the log of the turn: a parser that takes a job over replays the turn from its start; the
parse is deterministic, and events are published through a per-(turn, attempt) seq mark, so
the client sees every event exactly once.  Each call is enqueued on its tool pool the moment
it is ready (arq job id ``{sid}:{turn}:{index}``: a replay cannot enqueue it twice).

At the turn's end the parser -- the one stage that holds the turn's content and calls -- records
the turn's assistant message (``Sessions.record_message``), tells the decoder which calls the
turn made (``TurnParsed``, for its KV pin), then ends the session or hands the turn to the barrier.

Calls are checked against the session's tools: a call of a tool the session was not given is
reported ``tool_call.invalid`` (``unavailable``) and never run; the model gets an error result.
A ONESHOT or RETURN_CALLS turn offered no tools parses no calls at all: its text is content.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis.asyncio as aioredis

from runtime import bus
from runtime.barrier import Arrival
from runtime.config import Config, default_worker_id
from runtime.consumer import Consumer, Done
from runtime.heartbeat import Heartbeat
from runtime.session import Field, SessionMode
from runtime.tool_queue import Dispatcher
from runtime.turns import Turns
from schemas import keys
from schemas.codec import UndecodableEntry, decode_job, decode_token, encode
from schemas.events import (ContentDelta, Event, ParseTurn, ReasoningDelta, TokenChunk, TokenEnd,
                            ToolCallInvalid, ToolCallReady, TurnEnded, TurnParsed, call_id_prefix)
from workers.parser import make_parser

log = logging.getLogger(__name__)

Call = ToolCallReady | ToolCallInvalid


class TurnSuperseded(Exception):
    """A newer attempt of the turn exists: this job's attempt is abandoned."""


class ParserWorker:
    """The handler of ``ts:parse:jobs``: one ``TurnParse`` per job."""

    def __init__(self, cfg: Config, r: aioredis.Redis, dispatcher: Dispatcher) -> None:
        self.cfg, self.r, self.dispatcher = cfg, r, dispatcher
        self.me = cfg.worker_id or default_worker_id("parser")
        self.turns = Turns(r, cfg.session_ttl_s, batcher=bus.Batcher(r))  # one round trip for many sessions
        self.sessions, self.barrier = self.turns.sessions, self.turns.barrier
        reader = bus.GroupReader(r, [keys.PARSE_JOBS], keys.PARSE_GROUP, self.me, count=16, block_ms=cfg.block_ms)
        self.consumer = Consumer(f"parser {self.me}", reader, self, self.turns, lease_s=cfg.lease_s,
                                 reclaim_idle_ms=cfg.reclaim_idle_ms)
        self.heartbeat = Heartbeat(r, "parser", self.me, cfg.heartbeat_ms, cfg.heartbeat_ttl_ms,
                                   lambda: {"turns": len(self.consumer.inflight)})

    async def run(self, stop: Any) -> None:
        await self.heartbeat.beat()
        log.info("parser worker %s up", self.me)
        try:
            await self.consumer.run(stop, also=[self.heartbeat.loop])
        finally:
            await self.heartbeat.stop()

    async def handle(self, entry: bus.Entry) -> Done:
        job = decode_job(entry.data)
        if not isinstance(job, ParseTurn):
            raise UndecodableEntry(f"not a parse job: {type(job).__name__}")
        try:
            await TurnParse(self, job).run()
        except TurnSuperseded:
            pass
        return Done.ACK


class TurnParse:
    """The parse of one turn attempt: token log in, events and dispatches out."""

    def __init__(self, w: ParserWorker, job: ParseTurn) -> None:
        self.w, self.job = w, job
        self.sid, self.turn, self.attempt = job.sid, job.turn, job.attempt
        self.seq = 0
        self.next_chunk = 0  # token chunks of the attempt come with seq 0, 1, ...; a repeat is skipped
        self.calls: list[Call] = []
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.deferred: list[Call] = []
        self.cursor = Field.parser_seq(self.turn, self.attempt)

    async def run(self) -> None:
        info = await self.w.sessions.get(self.sid)
        if info is None:
            return
        self.info = info
        self.offered = info.tool_names()
        calls = bool(info.tools) or info.mode is SessionMode.LOOP
        self.parser = make_parser(self.w.cfg.tool_format, tools=info.tools or None, reasoning=self.w.cfg.reasoning or None,
                                  call_id_prefix=call_id_prefix(self.turn), calls=calls)
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
            if tok.seq < self.next_chunk:
                return False  # written twice: the decoder retried a write whose reply was lost (a failover)
            self.next_chunk = tok.seq + 1
            await self._emit(self.parser.feed(tok.text), t0=tok.t_emit)
            return False
        await self._end(tok)
        return True

    def _checked(self, body: Any) -> Any:
        """A ready call of a tool the session was not given becomes an invalid, unavailable call."""
        if not isinstance(body, ToolCallReady) or body.name in self.offered:
            return body
        have = ", ".join(sorted(self.offered)) or "none"
        return ToolCallInvalid(index=body.index, id=body.id, name=body.name, raw=body.arguments, unavailable=True,
                               error=f"tool {body.name!r} is not available in this session (its tools: {have})")

    async def _emit(self, bodies: list[Any], t0: float = 0.0) -> None:
        items: list[tuple[int, bytes]] = []
        calls: list[Call] = []
        for body in map(self._checked, bodies):
            self.seq += 1
            if isinstance(body, ContentDelta):
                self.content.append(body.text)
            elif isinstance(body, ReasoningDelta):
                self.reasoning.append(body.text)
            elif isinstance(body, (ToolCallReady, ToolCallInvalid)):
                calls.append(body)
            ev = Event(sid=self.sid, turn=self.turn, attempt=self.attempt, seq=self.seq, src="parser",
                       ts=time.time(), body=body, t0=t0)
            items.append((self.seq, encode(ev)))
        await self._await_client(calls)  # before the client can see them and post results
        if items and items[-1][0] > self.published:
            self.published = await self.w.sessions.publish_once(self.sid, self.turn, self.cursor, items,
                                                                 bus.EVENT_STREAM_MAXLEN)
        self.calls += calls
        if self.w.cfg.dispatch == "after_turn":
            self.deferred += calls
        else:
            await self._dispatch(calls)

    def _is_client_call(self, call: Call) -> bool:
        return isinstance(call, ToolCallReady) and self.info.is_client_tool(call.name)

    async def _await_client(self, calls: list[Call]) -> None:
        """In a LOOP session, mark client-side calls pending: the client posts their results."""
        if self.info.mode is not SessionMode.LOOP:
            return
        for call in calls:
            if self._is_client_call(call):
                await self.w.barrier.awaiting_client(self.sid, self.turn, call.index, call.id, call.name,
                                                      call.arguments)

    async def _dispatch(self, calls: list[Call]) -> None:
        if self.info.oneshot:
            return
        for call in calls:
            if not self._is_client_call(call):
                await self.w.dispatcher.dispatch(self.sid, self.turn, self.attempt, call)

    async def _end(self, end: TokenEnd) -> None:
        await self._emit(self.parser.finish())
        await self._dispatch(self.deferred)
        reason = self._finish_reason(end)
        await self.w.sessions.record_message(self.sid, self.turn, self._message(end.text))
        await self._emit([TurnEnded(finish_reason=reason, completion_tokens=end.completion_tokens,
                                    n_calls=len(self.calls))])
        await self._tell_decoder()
        log.info("sid=%s turn=%d attempt=%d parsed: %d calls, %s", self.sid, self.turn, self.attempt,
                 len(self.calls), end.finish_reason)
        if not self.calls or self.info.oneshot:
            await self.w.turns.end(self.sid, self.turn, reason, "".join(self.content), info=self.info)
            return
        if await self.w.barrier.turn_end(self.sid, self.turn, self._awaited()) == Arrival.COMPLETED:
            await self.w.turns.complete(self.sid, self.turn)

    def _awaited(self) -> int:
        """Results the barrier waits for: every call, except in RETURN_CALLS the caller's own."""
        if self.info.mode is SessionMode.RETURN_CALLS:
            return sum(1 for c in self.calls if not self._is_client_call(c))
        return len(self.calls)

    def _message(self, raw: str) -> dict[str, Any]:
        """The turn's assistant message, as the conversation stores it."""
        content = "".join(self.content)
        msg: dict[str, Any] = {"role": "assistant", "content": content or (None if self.calls else ""), "raw": raw}
        if self.reasoning:
            msg["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": c.arguments if isinstance(c, ToolCallReady) else c.raw}}
                for c in sorted(self.calls, key=lambda c: c.index)]
        return msg

    async def _tell_decoder(self) -> None:
        """The decoder that generated the turn pins its KV for these calls, or releases it."""
        if self.job.worker:
            parsed = TurnParsed(sid=self.sid, turn=self.turn, attempt=self.attempt, calls=[c.name for c in self.calls])
            await bus.add(self.w.r, keys.decoder_jobs(self.job.worker), encode(parsed))

    def _finish_reason(self, end: TokenEnd) -> str:
        if end.finish_reason == "length":
            return "length"
        return "tool_calls" if self.calls else end.finish_reason
