"""How the decode worker turns the engine's deltas into token-log entries, and notices a cancel.

    engine step: deltas of many turns ──> TurnChunks.add (no await) ──> ChunkWriter round:
                                                                          XADD each due turn's buffered text
      a turn's first token: due at once (a round at this loop iteration's (+ HMGET status, turn where that
      end); later tokens: due when the turn's oldest buffered token would turn's abort check is due),
      be ``ms`` old before its next delta came, or at ``ms`` (a timer),    ONE pipelined round trip
      or at once when it buffered ``n`` tokens or a call's end

Contracts:

* **One round trip per step.**  An engine hands a step's deltas to the event loop in one callback;
  the turns take them in that loop iteration and the round starts after them, so what one step
  made for every session leaves in one pipeline.  One round is in flight at a time: what arrives
  meanwhile merges per turn into its next chunk (the writer coalesces while redis lags).
* **Sized by step and time, not per token.**  After a turn's first chunk (which leaves at once:
  time to first token is never traded), a turn's text waits at most ``ms`` from its oldest
  buffered token (unless a round is in flight: then it goes in the next), and leaves with the last
  engine step before that: the step after which waiting for the turn's next delta (expected one
  inter-delta gap later) would pass ``ms``.  A batching engine's steps carry the rounds, so a token does not wait for a clock out of
  step with the engine (on average half a step, not half of ``ms``), and the turns of one step split
  into as many phases as ``ms`` holds steps (each round carries those turns, not every turn at
  once).  A round that only steps made due begins ``ms``/4 after the one before at the soonest
  (never past the oldest buffered token's ``ms``): the turns of an engine that does not batch, whose
  deltas come out of step with each other, share rounds instead of a round trip each.  A batching
  engine whose steps are at least ``ms``/4 apart keeps its rounds (with the defaults, a turn of a
  faster one reaches ``n`` tokens first and goes at once); otherwise a chunk may wait up to ``ms``/4
  after any round, never past ``ms``.  A timer sends a turn whose deltas stopped coming at ``ms``, with every turn within
  ``ms``/4 of its own.  A turn leaves sooner when it buffered ``n`` tokens or the text that may end
  one of its calls (``ends``: its format's close markers, so that a tool never waits to start), or
  is flushed.  What one turn makes due never takes the others' text early: a busy decoder (a new
  turn's first token every few steps) still writes every turn in chunks of ``ms``'s size, not of
  the interval between two turns' starts (about ``ms`` less one step).
* **In order, exactly once downstream.**  A turn's chunks carry consecutive ``seq`` and leave in
  order.  A round that fails because redis is unreachable is sent again, whole, every
  ``bus.RETRY_S`` for up to ``outage_s``; an XADD whose reply was lost is appended twice and the
  parser skips the repeat (same ``seq``).  Past ``outage_s`` the round's turns fail: their next
  ``add`` or ``flush`` raises, and the turn is abandoned and regenerated as a new attempt.
* ``flush(turn)`` returns once everything the turn added is written (its ``TokenEnd`` follows).
* ``lead(turn, *builds)`` queues commands (each build one) just ahead of the turn's next chunk, in
  the same round trip (the turn's ``turn.started``, so that its first token costs one round trip,
  not two, and a text-only turn's routing announcement): a command must be one that may run twice (a
  failed round is sent again, whole) and must not be able to fail without the chunk behind it (a
  script goes as EVAL, never EVALSHA); an error of any fails the turn.
* ``flush(turn, then)`` sends ``then(seq)``'s commands just behind the turn's last chunk, in its round
  trip (a text-only turn's end: its ``turn.ended``, the fold and ``session.ended`` reach the event log
  with its last text, one round trip, one wake of every reader, not two), under the same rules as a
  lead's; their replies are ``flush``'s.
* **Token chunks or events.**  A turn's chunks are ``TokenChunk`` entries of its token log, for its
  parser; a text-only turn (``runtime.turns.text_only``), and a turn that may call until its first
  markup (a content run), opens with ``make``, which turns each chunk into the parse stage's event for
  the session's event log instead (``workers.decode.turn``).
  Such a turn writes no chunk without text (a delta that ended inside a character): its text goes
  with the next one, its seq is not taken, and its ``lead`` goes alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from runtime import bus
from runtime.session import Field, Status
from schemas.codec import encode
from schemas.events import TokenChunk
from workers.decode.engine import Engine, GenerateRequest

log = logging.getLogger(__name__)

Make = Callable[[int, str, float], bytes]  # (seq, text, since) -> the stream entry of a chunk
Build = Callable[[Any], Any]  # queues one command on a pipeline
Trail = Callable[[int], list[Build]]  # (the turn's chunks written) -> the commands behind its last one
EARLY_S = 0.002  # a deadline this close counts as reached: uvloop's timers round to the millisecond and may
# fire up to one early, and re-arming for the rest would spin the loop until it passed


class AbortCheck:
    """Abort the generation when the session was cancelled (status no longer active), has moved on
    to another turn, or the turn has a newer attempt (this decoder was taken for dead while it went
    on).  A cancel tells the decoder at once (``CancelTurn``: ``stop``); this check is the backstop
    for an ending that sent no note or whose note was lost: at most every ``interval_s``, one status
    read in the round that carries the turn's chunk (0.01 commands per token at 20 tokens/s).
    Nothing a cancelled turn generates after its ``session.ended`` is published, so the interval
    bounds only the generation wasted when the note does not arrive; an attempt that a newer one
    replaced publishes no end (``Sessions.end_text_call``; a parser stops reading it at the newer
    attempt's first chunk in its token log, or, when that attempt writes none -- its content was all
    its decoder's -- once the turn ended, by its sweep)."""

    interval_s = 5.0

    def __init__(self, engine: Engine, req: GenerateRequest, sid: str, turn: int, attempt: int) -> None:
        self.engine, self.req, self.sid, self.turn, self.attempt = engine, req, sid, turn, attempt
        self.fields = ("status", "turn", Field.attempts(turn))  # what the check reads
        self.next_at = time.monotonic() + self.interval_s
        self.aborted = False

    def due(self, now: float) -> bool:
        """Whether this chunk's write should also read the session's status (same round trip)."""
        if self.aborted or now < self.next_at:
            return False
        self.next_at = now + self.interval_s
        return True

    async def apply(self, status: bytes | None, turn: bytes | None, attempts: bytes | None) -> None:
        if (status or b"").decode() != Status.ACTIVE or int(turn or -1) != self.turn:
            await self.stop("no longer active")
        elif int(attempts or 0) > self.attempt:
            await self.stop(f"attempt {self.attempt} superseded")

    async def stop(self, why: str) -> None:
        """Abort the generation (once)."""
        if self.aborted:
            return
        self.aborted = True
        log.info("sid=%s turn=%d %s: aborting generation", self.sid, self.turn, why)
        await self.engine.abort(self.req.rid)


class TurnChunks:
    """One turn attempt's side of the writer: its buffered text, its next ``seq``, its abort check."""

    __slots__ = ("abort", "attempt", "due", "ends", "error", "first", "gap", "head", "keep", "last", "make", "maxlen",
                 "oldest", "pending", "seq", "session_key", "since", "stream", "tail", "text", "tokens", "trail",
                 "trailed", "turn", "waiters")

    def __init__(self, stream: str, session_key: str, turn: int, attempt: int, abort: AbortCheck | None,
                 ends: tuple[str, ...] = (), make: Make | None = None, maxlen: int = bus.TOKEN_STREAM_MAXLEN) -> None:
        self.stream, self.session_key, self.turn, self.attempt, self.abort = stream, session_key, turn, attempt, abort
        self.make, self.maxlen = make, maxlen  # ``make``: a chunk's entry when it is not a ``TokenChunk``
        self.ends = ends  # text that may end a call: its arrival sends the turn's buffer at once
        self.keep = max(map(len, ends), default=1) - 1  # what ``tail`` keeps: a marker split across deltas
        self.tail = ""  # the end of the text added so far (``keep`` characters)
        self.text: list[str] = []  # buffered, not yet taken into a round
        self.tokens = 0
        self.since = 0.0  # wall-clock time the oldest buffered delta was taken from the engine
        self.oldest = 0.0  # the same on the writer's clock (its deadline is ``oldest`` + ``ms``)
        self.last = 0.0  # the writer's clock at the latest delta
        self.gap = 0.0  # the interval between the latest two deltas (when the next one is expected)
        self.seq = 0  # chunks taken into rounds so far (the next chunk's seq)
        self.first = True  # no chunk taken yet: the next round is due at once
        self.due = False  # its buffer goes in the next round (its first token, n tokens, a call's end, its next
        # delta would come past its deadline, a flush)
        self.pending = 0  # chunks taken into rounds whose round trip has not succeeded yet
        self.error: BaseException | None = None  # a round of this turn failed for good
        self.waiters: list[asyncio.Future] = []  # ``flush`` callers
        self.head: tuple[Build, ...] | None = None  # ``lead``: sent just ahead of the next chunk
        self.trail: Trail | None = None  # ``flush``'s ``then``: sent just behind the last chunk
        self.trailed: list[Any] | None = None  # the replies of ``trail``'s commands

    def idle(self) -> bool:
        return not self.text and not self.tokens and not self.pending and self.head is None and self.trail is None

    def fail(self, exc: BaseException) -> None:
        self.error = exc
        for fut in self.waiters:
            if not fut.done():
                fut.set_exception(exc)
        self.waiters.clear()

    def settle(self) -> None:
        """Wake the ``flush`` callers once nothing is buffered or on its way."""
        if self.idle():
            for fut in self.waiters:
                if not fut.done():
                    fut.set_result(None)
            self.waiters.clear()


# one turn's part of a round: its chunk's XADD (None: none), whether its status is read, its lead's and trail's
# commands; sent as head, XADD, status read, trail
Sent = tuple[TurnChunks, tuple | None, bool, tuple[Build, ...] | None, tuple[Build, ...]]


class ChunkWriter:
    """The decoder's token-log writer: every turn's chunks, one pipelined round trip per round."""

    def __init__(self, r: aioredis.Redis, n: int, ms: float, outage_s: float = bus.OUTAGE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.r, self.n, self.s, self.outage_s = r, n, ms / 1000.0, outage_s
        self.clock = clock  # seconds, for the turns' deltas and deadlines
        self.dirty: dict[TurnChunks, None] = {}  # turns with buffered text, oldest buffered delta first
        self.urgent = False  # some turn is due (``TurnChunks.due``) at once: a round now
        self.stepped = False  # some turn is due with its step: a round, ``ms``/4 after the last one began at the soonest
        self.started = float("-inf")  # when the last round began (the writer's clock)
        self.busy = False  # a round trip is in flight
        self.rounds = 0  # round trips that carried chunks (tests, stats)
        self._kicked = False
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()

    def open(self, stream: str, session_key: str, turn: int, attempt: int, abort: AbortCheck | None = None,
             ends: tuple[str, ...] = (), make: Make | None = None,
             maxlen: int = bus.TOKEN_STREAM_MAXLEN) -> TurnChunks:
        """A turn's side of the writer; with ``make``, its chunks are the entries ``make`` builds (see the
        module doc), on a stream of at most ``maxlen`` entries."""
        return TurnChunks(stream, session_key, turn, attempt, abort, ends, make, maxlen)

    def add(self, tc: TurnChunks, text: str, n_tokens: int) -> None:
        """Buffer a delta of ``tc`` for the next round; raises the turn's error if a round failed it."""
        if tc.error is not None:
            raise tc.error
        if not text and not n_tokens:
            return
        now = self.clock()
        if tc.last:
            tc.gap = now - tc.last
        tc.last = now
        if not tc.tokens and not tc.text:  # joins ``dirty`` last, with the latest ``oldest``
            tc.since, tc.oldest = time.time(), now
        tc.text.append(text)
        tc.tokens += n_tokens
        self.dirty[tc] = None
        ended = bool(tc.ends) and self._ends_call(tc, text)  # always: it keeps the tail a marker may span
        if tc.first or tc.tokens >= self.n or ended:
            tc.due = self.urgent = True
        elif now - tc.oldest + tc.gap >= self.s:
            tc.due = self.stepped = True
        self._schedule()

    @staticmethod
    def _ends_call(tc: TurnChunks, text: str) -> bool:
        """Whether ``text`` completes one of ``tc.ends`` (one that began in the text before it included)."""
        seen, old = tc.tail + text, len(tc.tail)
        tc.tail = seen[-tc.keep:] if tc.keep else ""
        return any(end in seen[max(0, old - len(end) + 1):] for end in tc.ends)

    def lead(self, tc: TurnChunks, *builds: Build) -> None:
        """Send each ``build(pipe)`` (one command each) in the round that carries ``tc``'s next chunk, just
        ahead of it, in order."""
        tc.head = builds or None

    async def flush(self, tc: TurnChunks, then: Trail | None = None) -> list[Any] | None:
        """Until everything ``tc`` added is written; raises the turn's error.  ``then`` (a turn opened with
        ``make``): ``then(seq)``, seq the turn's chunks once its last is taken, gives commands (each build
        one) sent just behind that chunk, in its round trip -- or in a round of their own after the ones in
        flight, when nothing is buffered; their replies are returned (see the module doc)."""
        if tc.error is not None:
            raise tc.error
        if then is not None:
            assert tc.make is not None, "a trail follows the events of a turn its decoder parses"
            tc.trail = then
        if tc.idle():
            return tc.trailed
        fut = asyncio.get_running_loop().create_future()
        tc.waiters.append(fut)
        if tc.text or tc.tokens or tc.head is not None or tc.trail is not None:  # buffered: due now (else a
            if tc not in self.dirty:  # round in flight is waited for); a lead or trail with nothing beside it
                tc.oldest = self.clock()
                self.dirty[tc] = None
            tc.due = self.urgent = True
            self._schedule()
        await fut
        return tc.trailed

    def close(self, tc: TurnChunks) -> None:
        """Forget ``tc`` (its turn ended or was abandoned): what it still buffered is dropped."""
        self.dirty.pop(tc, None)

    # ------------------------------------------------------------------ rounds
    def _schedule(self) -> None:
        if self.busy or not self.dirty:
            return
        loop = asyncio.get_running_loop()
        clock = self.clock()
        wait = self._wait(clock)
        if self.stepped:  # rounds that only steps made due are spaced: turns out of step share them
            wait = min(wait, self.started + self.s / 4 - clock)
        if self.urgent or wait <= EARLY_S:
            if not self._kicked:  # after every callback already queued: the rest of this step's turns
                self._kicked = True
                loop.call_soon(self._start)
            return
        at = loop.time() + wait
        if self._timer is not None:
            if self._timer.when() <= at + EARLY_S:
                return
            self._timer.cancel()
        self._timer = loop.call_later(wait, self._on_timer)

    def _wait(self, clock: float) -> float:
        """Seconds until the deadline of the oldest buffered delta (``dirty``'s first turn's)."""
        return next(iter(self.dirty)).oldest + self.s - clock

    def _on_timer(self) -> None:
        self._timer = None
        self._schedule()

    def _start(self) -> None:
        self._kicked = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.dirty:  # the turns that were due have closed since
            self.urgent = self.stepped = False
        if self.busy or not self.dirty:
            return
        started = self.clock()
        batch = self._take()
        if not batch:  # the turn that was due has closed since: the others wait for their time
            self._schedule()
            return
        self.started, self.busy = started, True
        task = asyncio.ensure_future(self._round(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _take(self) -> list[Sent]:
        """The chunks of the turns due (and of those whose oldest delta is, or is within ``ms``/4 of, ``ms``
        old, when one is), encoded; their buffers empty."""
        now, clock = time.monotonic(), self.clock()
        timed = self._wait(clock) <= EARLY_S  # the head's deadline (not only the spacing) started this round
        near = clock - self.s + (max(self.s / 4, EARLY_S) if timed else 0.0)  # one whose oldest is older goes too
        self.urgent = self.stepped = False
        batch, left = [], {}
        for tc in self.dirty:
            if not (tc.due or tc.oldest <= near):
                left[tc] = None
                continue
            text, xadd, tail = "".join(tc.text), None, ()
            try:  # the turn's own code builds its entries and its trail: what it raises fails it alone
                if tc.make is None:
                    data = encode(TokenChunk(turn=tc.turn, attempt=tc.attempt, seq=tc.seq, text=text,
                                             n_tokens=tc.tokens, t_emit=tc.since))
                    xadd = bus.xadd(tc.stream, data, tc.maxlen)
                elif text:
                    xadd = bus.xadd(tc.stream, tc.make(tc.seq, text, tc.since), tc.maxlen)
                elif tc.head is None and tc.trail is None:  # no text, nothing to lead or trail: nothing to send
                    tc.text, tc.tokens, tc.due = [], 0, False
                    tc.settle()
                    continue
                if tc.trail is not None:
                    tail = tuple(tc.trail(tc.seq + (xadd is not None)))
            except Exception as exc:
                tc.text, tc.tokens, tc.head, tc.trail, tc.due = [], 0, None, None, False
                tc.fail(exc)
                continue
            if xadd is not None:
                tc.seq, tc.first = tc.seq + 1, False
            tc.text, tc.tokens, tc.pending = [], 0, tc.pending + 1
            batch.append((tc, xadd, tc.abort is not None and tc.abort.due(now), tc.head, tail))
            tc.head, tc.trail, tc.due = None, None, False
        self.dirty = left
        return batch

    async def _round(self, batch: list[Sent]) -> None:
        try:
            replies = await bus.through_outage(lambda: self._round_trip(batch), self.outage_s, "decoder chunks")
        except Exception as exc:  # unreachable past the outage: the round's turns fail and are regenerated
            for tc, *_ in batch:
                tc.pending -= 1
                tc.fail(exc)
        else:
            self._settle(batch, replies)
        finally:
            self.busy = False
            self._schedule()

    async def _round_trip(self, batch: list[Sent]) -> list[Any]:
        pipe = self.r.pipeline(transaction=False)
        for tc, xadd, check, head, tail in batch:
            for build in head or ():
                build(pipe)
            if xadd is not None:
                pipe.execute_command(*xadd)
            if check:  # ahead of the trail: the status before the turn's own end
                pipe.execute_command("HMGET", tc.session_key, *tc.abort.fields)  # type: ignore[union-attr]
            for build in tail:
                build(pipe)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except AttributeError as exc:  # redis-py 5: a cluster pipeline whose client re-initialized its nodes
            raise aioredis.ConnectionError(f"cluster topology changed mid-pipeline ({exc})") from exc
        self.rounds += 1
        return replies

    def _settle(self, batch: list[Sent], replies: list[Any]) -> None:
        it = iter(replies)
        for tc, xadd, check, head, tail in batch:
            tc.pending -= 1
            led = [next(it) for _ in head or ()]
            written = next(it) if xadd is not None else None
            status = next(it) if check else None
            trailed = [next(it) for _ in tail]
            failed = next((x for x in (*led, written, *trailed) if isinstance(x, Exception)), None)
            if failed is not None:  # a server's answer to this turn's commands (not an outage)
                tc.fail(failed)
                continue
            if tail:
                tc.trailed = trailed
            if check and not isinstance(status, Exception):
                self._spawn(tc.abort.apply(*status))  # type: ignore[union-attr]
            tc.settle()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
