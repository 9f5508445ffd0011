"""The parse of one turn attempt: token-log entries in, events and dispatches out.

``take(entries)`` is synchronous: it decodes the entries, feeds the incremental parser and
returns a ``Step`` -- the events to publish and what else the entries brought.  A plain step
(content, reasoning, argument fragments: the per-token traffic) is published by the shared
reader (``workers.parser.token_reader``) together with every other turn's, in one round trip;
any other step -- a call became ready, the turn ended, an entry was undecodable, a newer attempt
showed up -- goes through ``finish(step)``, the ordered path below.

Each event carries the attempt's next seq.  The per-token events are plain XADDs
(``Sessions.append_call``); the ordered path's go through the once-script and its seq mark
(``Sessions.publish_once``), which also refuses them after the turn's ``session.ended`` (the
parse then publishes nothing more).  A parser that replays the turn from its token log starts
after what was published (``Sessions.parser_start``: the mark, or the log's tail) and
publishes nothing twice; what a stalled parser may repeat, readers drop.  Each call is enqueued
on its tool pool once published (arq job id ``{sid}:{turn}:{index}``: a replay cannot enqueue it
twice); in a LOOP session a client call is marked awaited before the client can see it.

At the turn's end the parser -- the one stage that holds the turn's content and calls -- records
the turn's assistant message in the round trip that publishes its ``turn.ended``
(``Sessions.record_and_publish``), tells the decoder which calls the turn made (``TurnParsed``,
for its KV pin), then ends the session -- its fold, ``session.ended`` and TTLs in one script,
from the message in hand (``Turns.end``) -- or hands the turn to the barrier.
Calls of a tool the session was not given are reported ``tool_call.invalid`` (``unavailable``).

A token chunk written twice (the decoder retried a write through a redis outage whose reply was
lost: ``workers.decode.turn``) is taken once: chunks of an attempt carry seq 0, 1, ...
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from runtime import bus
from runtime.barrier import Arrival, Barrier
from runtime.config import Config
from runtime.session import Field, SessionMode, Sessions
from runtime.tool_queue import Dispatcher
from runtime.turns import Turns
from schemas import keys
from schemas.codec import UndecodableEntry, decode_token, encode
from schemas.events import (ContentDelta, Event, ParseTurn, ReasoningDelta, TokenChunk, TokenEnd, ToolCallInvalid,
                            ToolCallReady, TurnEnded, TurnParsed, call_id_prefix)
from workers.parser import make_parser

log = logging.getLogger(__name__)

Call = ToolCallReady | ToolCallInvalid


@dataclass
class ParseContext:
    """What a turn being parsed uses of its parser worker (the worker builds it once; a turn never
    sees the worker itself)."""

    cfg: Config
    r: aioredis.Redis
    turns: Turns
    sessions: Sessions
    barrier: Barrier
    dispatcher: Dispatcher | None  # None: a parser that dispatches nothing (tests whose turns call no tool)
    batcher: bus.Batcher  # the worker's: what the turns send at once leaves in one round trip


class TurnSuperseded(Exception):
    """A newer attempt of the turn exists: this job's attempt is abandoned."""


@dataclass
class Step:
    """What one batch of token-log entries gave a turn."""

    items: list[tuple[int, bytes]] = field(default_factory=list)  # (seq, encoded event) to publish
    calls: list[Call] = field(default_factory=list)
    end: TokenEnd | None = None
    superseded: bool = False
    undecodable: list[tuple[bus.Entry, str]] = field(default_factory=list)

    @property
    def plain(self) -> bool:
        """Only events to publish: the shared reader publishes it with every other turn's."""
        return not (self.calls or self.end or self.superseded or self.undecodable)


class TurnParse:
    """The parse of one turn attempt (see the module doc); ``done`` resolves when it is over."""

    def __init__(self, ctx: ParseContext, job: ParseTurn) -> None:
        self.ctx, self.job = ctx, job
        self.sid, self.turn, self.attempt = job.sid, job.turn, job.attempt
        self.stream = keys.tokens(job.sid)
        self.after = job.after  # the last token-log entry taken
        self.seq = 0
        self.next_chunk = 0  # token chunks of the attempt come with seq 0, 1, ...; a repeat is skipped
        self.calls: list[Call] = []
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.deferred: list[Call] = []
        self.cursor = Field.parser_seq(self.turn, self.attempt)
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.seen = time.monotonic()  # when its token log last gave it an entry

    async def start(self) -> bool:
        """Read the session and what was already published; False when the session is gone."""
        # ended: the turn's session.ended is out (a replay after a cancel), or an ordered publish
        # finds it later: nothing more goes out.  One round trip with the session's record.
        info, self.published, self.ended = await self.ctx.sessions.parser_open(self.sid, self.turn, self.attempt)
        if info is None:
            return False
        if self.job.seq:  # the decoder published the turn's first content itself (``ParseTurn``)
            self.seq, self.published = self.job.seq, max(self.published, self.job.seq)
            self.content.append(self.job.content)
        self.info = info
        self.offered = info.tool_names()
        self.parser = make_parser(self.ctx.cfg.tool_format, tools=info.tools or None,
                                  reasoning=self.ctx.cfg.reasoning or None, call_id_prefix=call_id_prefix(self.turn),
                                  calls=info.may_call)
        return True

    async def ended_elsewhere(self) -> bool:
        """The turn ended without its token end reaching this parser (its decode job failed for good,
        the session was cancelled, or its record expired): nothing more will come."""
        ended = await self.ctx.sessions.field(self.sid, Field.ended(self.turn))
        if ended is not None:
            log.info("session %s turn %d ended elsewhere; parse stops", self.sid, self.turn)
            return True
        return not await self.ctx.r.exists(keys.session(self.sid))

    # ------------------------------------------------------------------ the synchronous part
    def take(self, entries: list[bus.Entry]) -> Step:
        """Feed token-log entries to the parser; stops at the turn's end or a newer attempt."""
        step = Step()
        self.seen = time.monotonic()
        for entry in entries:
            self.after = entry.id
            try:
                tok = decode_token(entry.data)
            except UndecodableEntry as exc:
                step.undecodable.append((entry, str(exc)))
                continue
            if tok.turn != self.turn or tok.attempt < self.attempt:
                continue
            if tok.attempt > self.attempt:
                step.superseded = True
                break
            if not isinstance(tok, TokenChunk):
                step.end = tok
                break
            if tok.seq < self.next_chunk:
                continue  # written twice: the decoder retried a write whose reply was lost (a failover)
            self.next_chunk = tok.seq + 1
            self._events(self.parser.feed(tok.text), step, t0=tok.t_emit)
        return step

    def _events(self, bodies: list[Any], step: Step, t0: float = 0.0) -> None:
        for body in map(self._checked, bodies):
            self.seq += 1
            if isinstance(body, ContentDelta):
                self.content.append(body.text)
            elif isinstance(body, ReasoningDelta):
                self.reasoning.append(body.text)
            elif isinstance(body, (ToolCallReady, ToolCallInvalid)):
                step.calls.append(body)
            ev = Event(sid=self.sid, turn=self.turn, attempt=self.attempt, seq=self.seq, src="parser",
                       ts=time.time(), body=body, t0=t0)
            step.items.append((self.seq, encode(ev)))

    def _checked(self, body: Any) -> Any:
        """A ready call of a tool the session was not given becomes an invalid, unavailable call."""
        if not isinstance(body, ToolCallReady) or body.name in self.offered:
            return body
        have = ", ".join(sorted(self.offered)) or "none"
        return ToolCallInvalid(index=body.index, id=body.id, name=body.name, raw=body.arguments, unavailable=True,
                               error=f"tool {body.name!r} is not available in this session (its tools: {have})")

    def unpublished(self, step: Step) -> bool:
        """Whether ``step`` holds events beyond what was already published (a replay holds none)."""
        return bool(step.items) and step.items[-1][0] > self.published and not self.ended

    def _new(self, step: Step) -> list[tuple[int, bytes]]:
        return [item for item in step.items if item[0] > self.published]

    def append_calls(self, step: Step) -> list[Any]:
        """The XADDs of ``step``'s new events, for the shared round trip; once all went out: ``published_to``."""
        return [self.ctx.sessions.append_call(self.sid, data, bus.EVENT_STREAM_MAXLEN) for _, data in self._new(step)]

    def published_to(self, step: Step) -> None:
        self.published = max(self.published, step.items[-1][0])

    # ------------------------------------------------------------------ the ordered path
    async def finish(self, step: Step) -> bool:
        """Publish a step that is not plain, in order, with what it brought; True when the turn is over."""
        for entry, reason in step.undecodable:
            await bus.dead_letter(self.ctx.r, entry, reason)
        await self._publish(step)
        if step.superseded:
            raise TurnSuperseded()
        if step.end is not None:
            await self._end(step.end)
            return True
        return False

    async def _publish(self, step: Step, message: dict[str, Any] | None = None) -> None:
        """Publish ``step``'s new events in order (with the turn's ``message``, when given, recorded in
        the same round trip before them), then dispatch its calls."""
        await self._await_client(step.calls)  # before the client can see them and post results
        sessions = self.ctx.sessions
        if self.unpublished(step):
            call = sessions.publish_call(self.sid, self.turn, self.cursor, self._new(step), bus.EVENT_STREAM_MAXLEN)
            mark = await (sessions.publish(call) if message is None
                          else sessions.record_and_publish(self.sid, self.turn, message, call))
            self.ended = mark < 0
            self.published = max(self.published, mark)
        elif message is not None:  # a replay: its events are out
            await sessions.record_message(self.sid, self.turn, message)
        self.calls += step.calls
        if self.ctx.cfg.dispatch == "after_turn":
            self.deferred += step.calls
        else:
            await self._dispatch(step.calls)

    def _is_client_call(self, call: Call) -> bool:
        return isinstance(call, ToolCallReady) and self.info.is_client_tool(call.name)

    async def _await_client(self, calls: list[Call]) -> None:
        """In a LOOP session, mark client-side calls pending: the client posts their results."""
        if self.info.mode is not SessionMode.LOOP:
            return
        for call in calls:
            if self._is_client_call(call):
                await self.ctx.barrier.awaiting_client(self.sid, self.turn, call.index, call.id, call.name,
                                                      call.arguments)

    async def _dispatch(self, calls: list[Call]) -> None:
        if self.info.oneshot:
            return
        for call in calls:
            if not self._is_client_call(call):
                await self.ctx.dispatcher.dispatch(self.sid, self.turn, self.attempt, call)

    async def _end(self, end: TokenEnd) -> None:
        tail = Step()
        self._events(self.parser.finish(), tail)
        await self._publish(tail)
        await self._dispatch(self.deferred)
        reason = self._finish_reason(end)
        message = self._message(end.text)
        last = Step()
        self._events([TurnEnded(finish_reason=reason, completion_tokens=end.completion_tokens,
                                n_calls=len(self.calls),
                                stop_sequence=end.stop_sequence if reason == "stop" else None)], last)
        await self._publish(last, message)
        log.info("sid=%s turn=%d attempt=%d parsed: %d calls, %s", self.sid, self.turn, self.attempt,
                 len(self.calls), end.finish_reason)
        if not self.calls or self.info.oneshot:  # the session ends: no continuation follows the decoder's note
            # no results to fold: no calls, or a oneshot turn's, which go back to its caller
            ending = self.ctx.turns.end(self.sid, self.turn, reason, "".join(self.content), info=self.info,
                                        parsed=message)
            for failed in await asyncio.gather(self._tell_decoder(), ending, return_exceptions=True):
                if isinstance(failed, BaseException):  # both finished: the job may be handled again
                    raise failed
            return
        await self._tell_decoder()  # before the barrier may send the continuation, on the same stream
        if await self.ctx.barrier.turn_end(self.sid, self.turn, self._awaited()) == Arrival.COMPLETED:
            await self.ctx.turns.complete(self.sid, self.turn)

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
        """The decoder that generated the turn pins its KV for these calls, or releases it.  The note
        never creates the decoder's stream (NOMKSTREAM): a live decoder's exists (its consumer group);
        one that is gone for good was deleted by the others' adoption, and a note is nobody else's."""
        if self.job.worker:
            parsed = TurnParsed(sid=self.sid, turn=self.turn, attempt=self.attempt, calls=[c.name for c in self.calls])
            stream, data = keys.decoder_jobs(self.job.worker), encode(parsed)  # with the session's ending, if any
            await self.ctx.batcher.call(lambda p: bus.add_to(p, stream, data, nomkstream=True))

    def _finish_reason(self, end: TokenEnd) -> str:
        if end.finish_reason == "length":
            return "length"
        return "tool_calls" if self.calls else end.finish_reason
