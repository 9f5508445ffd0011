"""The event relay: ONE shared stream reader per gateway process, fanning out to bounded
per-subscriber queues.

    ts:s:{a}:ev ──┐   XREAD of the streams that   ┌─> Subscription(a) ─> client 1
    ts:s:{b}:ev ──┼── changed (one task; the ─────┼─> Subscription(a) ─> client 2
    ts:s:{c}:ev ──┘   server says which: tracking)└─> Subscription(b) ─> client 3

Contracts:

* **Exactly once, in order.**  A subscription to session S "after id A" is registered in one
  synchronous step together with the reader's cursor C for S (the last id it dispatched;
  for a stream nobody here watched yet, the stream's last id when the watch began).  The
  history (A, C] is read by the subscriber itself with XRANGE, page by page, at the pace its
  client consumes; everything after C arrives from the shared reader through the queue.
  The subscriber skips any id <= the last one it yielded, so nothing is lost or repeated; and a
  parser event the log holds twice or after its turn's ``session.ended`` (``gateway.frames.Seen``)
  is dropped, a resumed subscription first meeting a page of what its client met before ``after``.
* **New subscriptions are noticed at once.**  Starting to watch a stream wakes the reader,
  which then reads with the new stream.  The wake ends the tracked reader's wait in this process
  and is kept until its next wait when none is in progress; with a blocking read (below) it is a
  token XADDed to this process's wake stream, which that read always includes from an explicit
  cursor, so a wake sent between two XREADs is never lost.
* **Nothing left: the stream ends.**  A subscription to a session that had already ended
  (``session_over``) reads the history to the stream's end and stops there; one whose ``after``
  is at or past the ``session.ended`` it waits for (a future id) stops when that event goes by.
* **Bounded memory; slow clients are dropped.**  A subscriber that already has ``queue_size``
  undelivered events when the next one arrives is dropped at once (``Subscription.ended`` is
  set, reason ``"slow"``); its connection closes (WebSocket close code 4008) and the client
  resumes with ``after=<the last id it received>``.
* **Bytes forwarded.**  A frame is the stored event's JSON with its id put in front
  (``gateway.frames``); an event is decoded only where the relay must look inside it.
* **Reads in the streams that changed.**  The reads are a ``runtime.bus.WakeableRead``: a
  connection whose reads the server tracks, and a listener it tells which watched streams
  changed (``runtime.tracked_reads``: per master on a Redis Cluster), so a read names those
  alone, not every watched stream.  A server that refuses tracking (an ACL without ``CLIENT``)
  gets one blocking XREAD over every watched stream and the wake stream.  The contracts above
  hold on each.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable

import redis.asyncio as aioredis

from gateway.frames import Frame, Seen, StreamId, fmt_id, make_frame, parse_id, stream_pos
from runtime import bus
from runtime.mailbox import Mailbox
from schemas import keys

log = logging.getLogger(__name__)

_IDLE = object()
HISTORY_PAGE = 256


class Dropped(Exception):
    """The subscription ended before its session did: ``reason`` is "slow" or "shutdown"."""

    def __init__(self, reason: str, last_id: str) -> None:
        super().__init__(f"subscription dropped ({reason}); resume after {last_id}")
        self.reason, self.last_id = reason, last_id


class Subscription:
    """One client's view of one session's events after ``after``: history first, then live.

    Iterate ``frames()``.  It ends after a ``session.ended`` event of turn >= ``stop_turn``
    (the session's turn when the client subscribed), when such an event goes by at or before
    ``after``, or -- for a session that had ended already (``session_over``) -- when the history
    is read; it raises ``Dropped`` when the relay drops the subscriber.  Call
    ``Relay.unsubscribe`` when done.
    """

    def __init__(self, relay: Relay, sid: str, after: StreamId, until: StreamId, stop_turn: int,
                 session_over: bool = False) -> None:
        self.relay, self.session, self.until, self.stop_turn = relay, sid, until, stop_turn
        self.session_over = session_over
        self.last = after
        self.queue: Mailbox[Frame | None] = Mailbox()  # bound enforced by offer(); one consumer: ``frames``
        self.ended = asyncio.Event()
        self.reason = ""
        self.seen = Seen()  # repeats and late events are dropped, not yielded

    @property
    def last_id(self) -> str:
        return fmt_id(self.last)

    def offer(self, frame: Frame) -> bool:
        """Queue a live frame (reader side); False when the queue is full and the subscriber is dropped."""
        if self.queue.qsize() >= self.relay.queue_size:
            self.end("slow")
            return False
        self.queue.put_nowait(frame)
        return True

    def end(self, reason: str) -> None:
        """Stop this subscription: its consumer raises ``Dropped(reason)`` at once."""
        if not self.ended.is_set():
            self.reason = reason
            self.ended.set()
            self.queue.put_nowait(None)

    def backlog(self) -> bool:
        """Whether more frames are queued already: a consumer may take them before it writes."""
        return not self.queue.empty()

    async def frames(self, idle_s: float | None = None) -> AsyncIterator[Frame | None]:
        """Every event after ``after`` exactly once, in order; ``None`` after each ``idle_s`` without one."""
        if self.last > (0, 0):
            await self._seed()
        async for frame in self._history():
            if not self.seen.fresh(frame):
                continue
            yield frame
            if self._final(frame):
                return
        if self.session_over and not self.ended.is_set():
            return  # the session had ended and its events are all read: nothing more will come
        while True:
            frame = await self._next(idle_s)
            if frame is _IDLE:
                yield None
                continue
            if frame is None:
                raise Dropped(self.reason, self.last_id)
            if frame.pos <= self.last:
                if self._final(frame):
                    return  # the end went by before ``after``: the client is past it
                continue  # already yielded from the history
            self.last = frame.pos
            if not self.seen.fresh(frame):
                continue
            yield frame
            if self._final(frame):
                return

    async def _seed(self) -> None:
        """A resumed subscription meets what its client met before ``after`` (a page of it): a
        repeat of an event the client already has is dropped after a reconnect too."""
        rows = await self.relay.r.xrevrange(keys.events(self.session), max=self.last_id, count=HISTORY_PAGE)
        for raw_id, fields in reversed(rows):
            frame = make_frame(raw_id.decode(), fields.get(bus.FIELD, b""))
            if frame is not None:
                self.seen.fresh(frame)

    async def _history(self) -> AsyncIterator[Frame]:
        while self.last < self.until and not self.ended.is_set():
            rows = await self.relay.r.xrange(keys.events(self.session), min="(" + self.last_id,
                                             max=fmt_id(self.until), count=HISTORY_PAGE)
            if not rows:
                return
            for raw_id, fields in rows:
                entry_id = raw_id.decode()
                self.last = stream_pos(entry_id)
                frame = make_frame(entry_id, fields.get(bus.FIELD, b""), self.last)
                if frame is not None:
                    yield frame

    async def _next(self, idle_s: float | None) -> object:
        if idle_s is None:
            return await self.queue.get()
        if not self.queue.empty():  # no timer, task and future per event while events are waiting
            return self.queue.get_nowait()
        try:  # not asyncio.wait_for: on 3.11 it swallows a cancel that meets an arriving event
            async with asyncio.timeout(idle_s):
                return await self.queue.get()
        except TimeoutError:
            return _IDLE

    def _final(self, frame: Frame) -> bool:
        return frame.ends(self.stop_turn)


class _Watch:
    """The reader's state for one watched stream: its cursor (and the cursor's id, as its XREAD takes
    it, kept rather than formatted for every read) and the subscribers fed from it."""

    __slots__ = ("_cursor", "cursor_id", "key", "ready", "subs")

    def __init__(self, sid: str, cursor: StreamId | None = None) -> None:
        self.key = keys.events(sid)
        self.subs: set[Subscription] = set()
        self.ready = asyncio.Event()
        self.cursor = cursor

    @property
    def cursor(self) -> StreamId | None:
        return self._cursor

    @cursor.setter
    def cursor(self, pos: StreamId | None) -> None:
        self._cursor, self.cursor_id = pos, fmt_id(pos) if pos is not None else ""

    def advance(self, pos: StreamId, entry_id: str) -> None:
        """The cursor moves to an entry just read (``entry_id`` is ``pos`` as Redis spells it)."""
        self._cursor, self.cursor_id = pos, entry_id


class RelayUnavailable(RuntimeError):
    """The relay could not start watching a stream (Redis unreachable)."""


class Relay:
    """One shared XREAD loop for every subscribed session of this process (see the module doc)."""

    def __init__(self, r: aioredis.Redis, reader: aioredis.Redis, *, queue_size: int = 1024,
                 block_ms: int = 5000, count: int = 512,
                 on_event: Callable[[str, Frame], None] | None = None, batcher: bus.Batcher | None = None) -> None:
        self.r = r  # ``reader``: a client used by the reader task only (through ``WakeableRead``)
        self.queue_size = queue_size
        self.on_event = on_event or (lambda sid, ev: None)
        self.gateway_id = uuid.uuid4().hex[:12]
        self._read = bus.WakeableRead(reader, r, keys.gateway_wake(self.gateway_id), count, block_ms, batcher)
        self._watches: dict[str, _Watch] = {}
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.draining = False
        self.dropped = 0
        self.relayed = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run(), name="relay-reader")

    def drain(self) -> None:
        """End every subscription (reason "shutdown"); new ones are refused from now on."""
        self.draining = True
        for watch in list(self._watches.values()):
            for sub in list(watch.subs):
                sub.end("shutdown")

    def drain_threadsafe(self) -> None:
        """``drain`` from a signal handler or another thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.drain)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.drain()
        self._watches.clear()
        await self._read.close()

    @property
    def subscribers(self) -> int:
        return sum(len(w.subs) for w in self._watches.values())

    @property
    def watched(self) -> int:
        return len(self._watches)

    # ------------------------------------------------------------------ subscriptions
    async def subscribe(self, sid: str, after: StreamId, stop_turn: int = 0,
                        session_over: bool = False, fresh: bool = False) -> Subscription:
        """A subscription to ``sid``'s events after ``after`` (see the module doc for the hand-over).

        ``session_over``: the session had ended when the client asked (its history is read to
        the stream's end, past the reader's cursor, and the subscription stops there).  ``fresh``:
        the caller wrote the session just now and has not started it, so it has no events yet: a
        watch it begins starts at the stream's beginning, with no round trip to find its end, and
        the reader's wake is not waited for -- it leaves in the batcher's next round trip, with the
        command that starts the session."""
        if self.draining:
            raise RelayUnavailable("the gateway is shutting down")
        end = parse_id(await bus.last_id(self.r, keys.events(sid))) if session_over else (0, 0)
        fresh = fresh and sid not in self._watches
        watch, new = (self._begin_fresh(sid), True) if fresh else await self._watch(sid)
        sub = Subscription(self, sid, after, max(watch.cursor, end), stop_turn,  # type: ignore[type-var]
                           session_over)
        watch.subs.add(sub)  # same step as reading the cursor: the hand-over point
        if fresh:
            self._read.wake_nowait()
        elif new:
            try:
                await self._read.wake()
            except BaseException:  # cancelled: nobody will unsubscribe what the caller never got
                self.unsubscribe(sub)
                raise
        return sub

    async def _watch(self, sid: str) -> tuple[_Watch, bool]:
        """The ready watch of ``sid`` (and whether this call began it)."""
        while True:
            watch = self._watches.get(sid)
            if watch is None:
                watch = self._watches[sid] = _Watch(sid)
                await self._begin(sid, watch)  # raises when Redis fails
                return watch, True
            await watch.ready.wait()
            if watch.cursor is not None:
                return watch, False
            # the subscriber that began it was cancelled before it was ready: begin again

    def _begin_fresh(self, sid: str) -> _Watch:
        """A new watch of a session with no events yet: its cursor is the stream's beginning."""
        watch = self._watches[sid] = _Watch(sid, (0, 0))
        watch.ready.set()
        return watch

    async def _begin(self, sid: str, watch: _Watch) -> None:
        try:
            watch.cursor = stream_pos(await bus.last_id(self.r, keys.events(sid)))
        finally:
            if watch.cursor is None and self._watches.get(sid) is watch:
                del self._watches[sid]
            watch.ready.set()

    def unsubscribe(self, sub: Subscription) -> None:
        """Forget a subscription (idempotent); an unwatched stream leaves the reader's next XREAD."""
        watch = self._watches.get(sub.session)
        if watch is None:
            return
        watch.subs.discard(sub)
        if not watch.subs and watch.cursor is not None:
            del self._watches[sub.session]

    # ------------------------------------------------------------------ the shared reader
    async def _run(self) -> None:
        while True:
            try:
                await self._read_once()
            except asyncio.CancelledError:
                raise
            except bus.REDIS_DOWN as exc:
                log.warning("relay: redis unavailable (%s); retrying", exc)
                await asyncio.sleep(0.5)
            except Exception:  # the reader's outermost boundary: it must never die
                log.exception("relay: reader iteration failed; continuing")
                await asyncio.sleep(0.5)

    def _streams(self) -> dict[str, str]:
        return {w.key: w.cursor_id for w in self._watches.values() if w.cursor_id}

    async def _read_once(self) -> None:
        by_sid: dict[str, list[bus.Entry]] = {}
        for entry in await self._read.read(self._streams()):  # every watch ready now is in this read
            by_sid.setdefault(keys.sid_of(entry.stream), []).append(entry)
        for sid, entries in by_sid.items():
            self._dispatch(sid, entries)

    def _dispatch(self, sid: str, entries: list[bus.Entry]) -> None:
        watch = self._watches.get(sid)
        if watch is None or watch.cursor is None:
            return  # unwatched while the read was in flight
        for entry in entries:
            pos = stream_pos(entry.id)
            if pos <= watch.cursor:
                continue
            watch.advance(pos, entry.id)
            frame = make_frame(entry.id, entry.data, pos)
            if frame is not None:
                self._fan_out(sid, watch, frame)
        if not watch.subs and self._watches.get(sid) is watch:
            del self._watches[sid]

    def _fan_out(self, sid: str, watch: _Watch, frame: Frame) -> None:
        self.relayed += 1
        self.on_event(sid, frame)
        for sub in list(watch.subs):
            if not sub.offer(frame):
                watch.subs.discard(sub)
                self.dropped += 1
                log.info("sid=%s relay: dropped a slow subscriber at %s", sid, sub.last_id)
