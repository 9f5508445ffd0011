"""One turn attempt on this decoder: the stored conversation in, token-log entries out.

    ParseTurn job + route ──> engine.generate(req) ──> deltas ──> ChunkWriter ──> TokenChunk ... ──> TokenEnd
                                                         (no await per token: the decoder's one writer sends
                                                          every turn's chunks of a step in one round trip;
                                                          a turn's TurnStarted goes just ahead of its first chunk)

The decoder reads the conversation (``runtime.turns`` folds every turn into it before a
continuation is sent) and never builds or parses messages itself -- except a text-only turn's
(``runtime.turns.text_only``: no tools, no client results, no reasoning, a format whose text is
content), whose parse would be the identity: its decoder is its parse stage.  Its chunks go to the
event log as the parse stage's ``content.delta`` events (src ``parser``, seq 1, 2, ...), and its end
records its message, publishes its ``turn.ended`` and ends the session in one script
(``Turns.end_text``; nothing from an attempt a newer one replaced): no parse job, no token log, no
note back.  A turn that may call starts the same way, as a content run (``workers.decode.content_run``,
on a format with markers and no reasoning parser): a turn whose text holds no markup ends as a
text-only one; at its first marker its content events are flushed, its ``ParseTurn`` (the events
already out) is queued in a round trip of its own, and the rest goes to its token log (``_hand_over``).
A turn held to a call (``tool_choice`` required or named) has no content run.  A cancel aborts the turn at
once: its ending sends the decoder a ``CancelTurn`` note (``TurnContext.cancel``); the writer also
checks, at most every ``AbortCheck.interval_s``, whether the session was cancelled
(``workers.decode.chunks``), for an ending that sent no note or whose note was lost.

While redis is unreachable (a cluster master failing over, a restart) its writes are retried
for up to ``bus.OUTAGE_S`` and the turn goes on where it was (not its parse job: ``_announce``'s, or a
content run's hand-over's, fails the turn, which is regenerated as a new attempt); a write retried after its reply was
lost appends the chunk twice, and the parser skips the repeat (same ``seq``).  Past
``OUTAGE_S`` the turn is abandoned and regenerated as a new attempt.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from runtime import bus, routing
from runtime.config import Config
from runtime.session import Field, SessionInfo, Sessions
from runtime.turns import Turns, text_only
from schemas import keys
from schemas.codec import encode
from schemas.events import (ContentDelta, Event, ParseTurn, TokenEnd, TurnEnded, TurnParsed, TurnRestarted,
                            TurnStarted)
from workers.decode.chunks import AbortCheck, ChunkWriter, TurnChunks
from workers.decode.constraints import Calls, turn_constraint
from workers.decode.constraints.formats import call_ends, call_marks
from workers.decode.content_run import ContentRun
from workers.decode.engine import Engine, GenerateDelta, GenerateRequest, SamplingParams
from workers.decode.kv_holds import KvHolds

log = logging.getLogger(__name__)


@dataclass
class TurnContext:
    """What a turn being generated uses of its decoder (the decoder builds it once; a turn never
    sees the worker itself)."""

    cfg: Config
    r: aioredis.Redis
    me: str  # the decoder's worker id
    engine: Engine
    turns: Turns
    chunks: ChunkWriter  # every turn's token chunks of a step: one round trip
    kv: KvHolds
    tokens_out: int = 0  # generated tokens, counted by the turns (every engine alike)
    running: set[tuple[str, int]] = field(default_factory=set)  # (sid, turn) taken here, until its job is done
    aborts: dict[tuple[str, int], AbortCheck] = field(default_factory=dict)  # of the running turns generating
    cancelled: set[tuple[str, int]] = field(default_factory=set)  # running turns cancelled before generating

    @property
    def sessions(self) -> Sessions:
        return self.turns.sessions

    async def cancel(self, sid: str, turn: int) -> bool:
        """Abort turn ``turn`` of ``sid`` if it is being generated here (a ``CancelTurn`` note); one
        taken here that is not generating yet reads its status with its first chunk instead."""
        check = self.aborts.get((sid, turn))
        if check is None:
            if (sid, turn) in self.running:
                self.cancelled.add((sid, turn))
            return False
        await check.stop("cancelled")
        return True

    def done(self, sid: str, turn: int) -> None:
        """The job that took turn ``turn`` of ``sid`` here is over."""
        self.running.discard((sid, turn))
        self.cancelled.discard((sid, turn))


class TurnRun:
    """Generates turn ``turn`` (attempt ``attempt``) of one session; ``run`` returns when it ended."""

    def __init__(self, ctx: TurnContext, info: SessionInfo, turn: int, attempt: int, continuation: bool,
                 messages: list[dict] | None = None, after: str | None = None,
                 ack: Callable[[], list[Callable[[Any], Any]]] | None = None) -> None:
        """``messages`` and ``after`` (the token log's newest id), when the caller read them after
        its claim (``Sessions.start_turn``); else ``run`` reads them.  ``ack``: the commands that ack the
        turn's job, which a text-only turn sends behind its end, in that round trip (``acked`` then)."""
        self.ctx, self.info, self.turn, self.attempt, self.continuation = ctx, info, turn, attempt, continuation
        self.messages, self.after, self.ack = messages, after, ack
        self.acked = False
        self.sid = info.sid
        self.parts: list[str] = []
        self.last: GenerateDelta | None = None
        self.started = False  # TurnStarted published (with the first delta)
        self.prefill = ""  # the forced start of the turn: it leads the first delta
        self.counted = False  # in the decoders' load (``routing.turn_started``) until its end's round trip
        self.text_only = ctx.cfg.plain_turns == "decoder" and text_only(ctx.cfg.tool_format, ctx.cfg.reasoning, info)
        marks = () if self.text_only or ctx.cfg.plain_turns != "decoder" or ctx.cfg.reasoning else (
            call_marks(ctx.cfg.tool_format))
        self.scan = ContentRun(marks) if marks else None  # a turn that may call: its content up to its first markup
        self.check: AbortCheck | None = None
        self.chunks: TurnChunks | None = None  # where the turn's text goes now

    @property
    def parsed_here(self) -> bool:
        """Whether this decoder is the turn's parse stage: a text-only turn, or one whose text held no
        markup (``ContentRun``) -- so far, or to its end once it ended."""
        return self.text_only or (self.scan is not None and self.scan.rest is None)

    async def run(self) -> None:
        messages = self.messages if self.messages is not None else await self.ctx.sessions.messages(self.sid)
        self.req = GenerateRequest(rid=f"{self.sid}:{self.turn}:{self.attempt}", session=self.sid, messages=messages,
                                   tools=self.info.tools or None, params=SamplingParams.from_dict(self.info.params),
                                   continuation=self.continuation, turn=self.turn, metadata=self.info.meta,
                                   constraint=turn_constraint(self.ctx.cfg, self.info.tools, self.info.params,
                                                              self.continuation, self.turn),
                                   conversation=routing.conversation_key(messages, self.info.tools or None))
        self.prefill = self.req.params.prefill
        if self.scan is not None and self.req.constraint is not None and self.req.constraint.calls is Calls.REQUIRED:
            self.scan = None  # it opens with a call (``tool_choice`` required or named): a parser from its start
        if self.scan is not None and self.after is None:  # a takeover: the token log's end, before anything is out
            self.after = await bus.last_id(self.ctx.r, keys.tokens(self.sid))
        if not self.parsed_here:  # the others announce themselves with their first chunk (``_turn_started``)
            await self._announce()
            self.counted = True
        if self.attempt > 1:
            await self._event(0, TurnRestarted(reason="decoder lost; regenerating"))
        try:
            await self._stream()
        finally:
            if self.counted:  # the turn did not reach its end's round trip
                with contextlib.suppress(*bus.REDIS_DOWN):
                    pipe = self.ctx.r.pipeline(transaction=False)
                    routing.turn_ended(pipe, self.ctx.me)
                    await pipe.execute()

    async def _announce(self) -> None:
        """Queue the turn's parse job and route the conversation's next requests here, in one round
        trip (before the turn ends, so that a client's immediate follow-up already finds the route)."""
        pipe = self.ctx.r.pipeline(transaction=False)
        after = self.after if self.after is not None else await bus.last_id(self.ctx.r, keys.tokens(self.sid))
        job = ParseTurn(sid=self.sid, turn=self.turn, attempt=self.attempt, worker=self.ctx.me, after=after)
        pipe.xadd(keys.PARSE_JOBS, {bus.FIELD: encode(job)}, maxlen=bus.JOB_STREAM_MAXLEN, approximate=True)
        routing.turn_started(pipe, self.ctx.cfg, self.req.conversation, self.ctx.me)
        await pipe.execute()

    def _token_log(self) -> TurnChunks:
        return self.ctx.chunks.open(keys.tokens(self.sid), keys.session(self.sid), self.turn, self.attempt, self.check,
                                    ends=call_ends(self.ctx.cfg.tool_format) if self.req.tools else ())

    async def _stream(self) -> None:
        gen = self.ctx.engine.generate(self.req).__aiter__()
        check = self.check = AbortCheck(self.ctx.engine, self.req, self.sid, self.turn, self.attempt)
        if self.parsed_here:
            chunks = self.ctx.chunks.open(keys.events(self.sid), keys.session(self.sid), self.turn, self.attempt, check,
                                          make=self._content, maxlen=bus.EVENT_STREAM_MAXLEN)
        else:
            chunks = self._token_log()
        self.chunks = chunks
        self.ctx.aborts[self.sid, self.turn] = check
        if (self.sid, self.turn) in self.ctx.cancelled:  # cancelled while it started: check with the first chunk
            check.next_at = 0.0
        ended: list[Any] | None = None
        try:
            chunks = await self._pump(gen, chunks)
            if self.parsed_here:  # the engine's request closed first, then the KV held, as for any turn's end
                if self.scan is not None and (held := self.scan.finish()):  # no markup came: content after all
                    self.ctx.chunks.add(chunks, held, 0)
                with contextlib.suppress(Exception):
                    await gen.aclose()
                self.ctx.kv.turn_ended(self.info, self.turn)
                ended = await self.ctx.chunks.flush(chunks, then=self._end_text)
                self.acked = self.ack is not None
            else:
                await self.ctx.chunks.flush(chunks)
        finally:
            del self.ctx.aborts[self.sid, self.turn]  # one run of a turn at a time here (``running``)
            self.ctx.chunks.close(self.chunks)
            await self._abandon(gen)
            with contextlib.suppress(Exception):
                await gen.aclose()
        if self.parsed_here:
            assert ended is not None  # the trail's replies: the end's, the load's
            await self._text_ended(int(ended[0]))
            return
        last = self.last
        end = TokenEnd(turn=self.turn, attempt=self.attempt, seq=chunks.seq, finish_reason=last.finish_reason or "stop",
                       completion_tokens=last.completion_tokens, prompt_tokens=last.prompt_tokens,
                       cached_tokens=last.cached_tokens, text="".join(self.parts), stop_sequence=last.stop_sequence)
        self.ctx.kv.turn_ended(self.info, self.turn)  # hold the KV until the parser says what the turn called
        # the load count goes down with the turn's end (a retry through an outage may count it twice:
        # each heartbeat rewrites the count)
        await self._through(lambda: self.ctx.sessions.end_turn(self.sid, self.turn, self.attempt, encode(end),
                                                             bus.TOKEN_STREAM_MAXLEN,
                                                             also=lambda p: routing.turn_ended(p, self.ctx.me)))
        self.counted = False
        log.log(self._done_level, "sid=%s turn=%d attempt=%d done: %d tokens, %s", self.sid, self.turn, self.attempt,
                last.completion_tokens, last.finish_reason)

    @property
    def _done_level(self) -> int:
        """A turn's end is logged at INFO in a session's loop; a oneshot request's (chat completions,
        Messages) at DEBUG: the gateway's access log has a line for it already."""
        return logging.DEBUG if self.info.oneshot else logging.INFO

    def _content(self, seq: int, text: str, since: float) -> bytes:
        """A chunk of a turn parsed here (``parsed_here``) -- ``seq`` 0, 1, ... -- as the parse stage's event
        ``seq + 1``."""
        return encode(Event(sid=self.sid, turn=self.turn, attempt=self.attempt, seq=seq + 1, src="parser",
                            ts=time.time(), body=ContentDelta(text=text), t0=since))

    def _end_text(self, chunks_written: int) -> list[Callable[[Any], Any]]:
        """The end of a turn parsed here (text-only, or no markup came), as its parser's would be
        (``workers.parser.turn_parse``: no calls, so the session ends): its message and
        ``turn.ended`` (the parse stage's next seq), the fold and ``session.ended``, in one script with the
        decoders' load and the job's ack (``ack``) beside it (``Turns.end_text``), sent just behind the turn's
        last chunk, in its round trip (``ChunkWriter.flush``'s ``then``; the script as EVAL, as a lead's).  An attempt that a newer
        one replaced (this decoder was taken for dead) writes nothing.  The load goes down here even when
        the round also carries the announcement that counted the turn (``_announcement``: just ahead)."""
        last = self.last
        reason, text = last.finish_reason or "stop", "".join(self.parts)
        seq = chunks_written + 1
        body = TurnEnded(finish_reason=reason, completion_tokens=last.completion_tokens,
                         stop_sequence=last.stop_sequence if reason == "stop" else None)
        ended = encode(Event(sid=self.sid, turn=self.turn, attempt=self.attempt, seq=seq, src="parser", ts=time.time(),
                             body=body))
        message = {"role": "assistant", "content": text, "raw": text}
        end = self.ctx.turns.end_text_call(self.sid, self.turn, self.attempt, reason, message, seq, ended, self.info)
        return [end.with_text, lambda p: routing.turn_ended(p, self.ctx.me), *(self.ack() if self.ack else [])]

    async def _text_ended(self, outcome: int) -> None:
        """After the end of a turn parsed here (``_end_text``; ``outcome``, its script's): its KV kept for a
        follow-up or released."""
        self.counted = False
        await self.ctx.kv.parsed(TurnParsed(sid=self.sid, turn=self.turn, attempt=self.attempt, calls=[]))
        log.log(self._done_level, "sid=%s turn=%d attempt=%d done: %d tokens, %s (all content%s)", self.sid, self.turn,
                self.attempt, self.last.completion_tokens, self.last.finish_reason or "stop",
                "; a newer attempt holds the turn" if outcome < 0 else "")

    async def _pump(self, gen: Any, chunks: TurnChunks) -> TurnChunks:
        """Hand every engine delta to the writer until the engine finishes (its first after TurnStarted);
        the turn's chunks at its end (its token log's, once a content run met markup)."""
        add, scan = self.ctx.chunks.add, self.scan
        async for delta in gen:
            delta = self._take(delta)
            if not self.started:
                self._turn_started(chunks)
            if scan is None or scan.rest is not None:
                add(chunks, delta.text, delta.n_tokens)
            else:
                content, rest = scan.feed(delta.text)
                if rest is None:
                    add(chunks, content, delta.n_tokens)
                else:
                    add(chunks, content, 0)
                    chunks = await self._hand_over(chunks, rest, delta.n_tokens)
            if delta.finished:
                break
        return chunks

    async def _hand_over(self, content: TurnChunks, rest: str, n_tokens: int) -> TurnChunks:
        """The turn's first markup came (``ContentRun``): its content events out, then its ``ParseTurn``,
        which names the events published so far (the content's, 1..seq), so that a parser goes on from
        them, and the rest of the turn to its token log.  The job goes in a round trip of its own, once,
        as ``_announce``'s: a round of the writer is sent again whole after an outage, which could queue
        it twice; a job that fails fails the turn (a new attempt).  The route and the load count went
        with the turn's first chunk (``_announcement``)."""
        await self.ctx.chunks.flush(content)
        self.ctx.chunks.close(content)
        assert self.scan is not None and self.scan.rest is not None and self.after is not None  # ``after``: ``run``
        text = "".join(self.parts)  # the turn so far: its content, then the rest from the marker on
        job = encode(ParseTurn(sid=self.sid, turn=self.turn, attempt=self.attempt, worker=self.ctx.me,
                               after=self.after, seq=content.seq, content=text[:len(text) - len(self.scan.rest)]))
        await self.ctx.r.execute_command(*bus.xadd(keys.PARSE_JOBS, job, bus.JOB_STREAM_MAXLEN))
        tokens = self.chunks = self._token_log()
        self.ctx.chunks.add(tokens, rest, n_tokens)
        return tokens

    def _take(self, delta: GenerateDelta) -> GenerateDelta:
        self.ctx.tokens_out += delta.n_tokens
        if self.prefill:  # the turn's text includes the forced prefill the engine continued
            delta, self.prefill = dataclasses.replace(delta, text=self.prefill + delta.text), ""
        self.last = delta
        self.parts.append(delta.text)
        return delta

    def _turn_started(self, chunks: TurnChunks) -> None:
        """``turn.started`` goes in the round trip of the turn's first chunk, just ahead of it: the parser
        meets the chunk only after the event is out, and the first token costs one round trip."""
        self.started = True
        last = self.last
        body = TurnStarted(prompt_tokens=last.prompt_tokens, cached_tokens=last.cached_tokens,
                           host_cached_tokens=last.host_cached_tokens, worker=self.ctx.me,
                           continuation=self.continuation)
        builds = [self._event_call(1, body).with_text]
        if self.parsed_here:
            builds += self._announcement()
        self.ctx.chunks.lead(chunks, *builds)

    def _announcement(self) -> list[Callable[[Any], Any]]:
        """The ``_announce`` of a turn parsed here (no parse job: the route and the load count alone), as
        builds for its first chunk's round: no round trip of its own before the first token.  The turn
        counts in the decoders' load from that round on (``counted``)."""
        first, *rest = routing.started_calls(self.ctx.cfg, self.req.conversation, self.ctx.me)

        def counted(pipe: Any) -> Any:
            self.counted = True
            return first(pipe)
        return [counted, *rest]

    async def _through(self, call: Any) -> Any:
        """``call()``, retried through a redis outage for up to ``bus.OUTAGE_S`` (see the module doc)."""
        return await bus.through_outage(call, bus.OUTAGE_S, f"sid={self.sid} turn={self.turn}")

    async def _abandon(self, gen: Any) -> None:
        """If the stream did not finish (redis lost, task cancelled), stop the engine's request."""
        if self.last is not None and self.last.finished:
            return
        with contextlib.suppress(Exception):
            await self.ctx.engine.abort(self.req.rid)

    def _event_call(self, seq: int, body: Any) -> bus.ScriptCall:
        """The once-script run that publishes this attempt's event ``seq`` (a repeat publishes nothing)."""
        data = encode(Event(sid=self.sid, turn=self.turn, attempt=self.attempt, seq=seq, src="decoder", ts=time.time(),
                            body=body))
        return self.ctx.sessions.publish_call(self.sid, self.turn, Field.decoder_seq(self.turn, self.attempt),
                                              [(seq, data)], bus.EVENT_STREAM_MAXLEN)

    async def _event(self, seq: int, body: Any) -> None:
        call = self._event_call(seq, body)
        await self._through(lambda: self.ctx.sessions.publish(call))
