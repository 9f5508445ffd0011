"""The parser's shared token reader: ONE read loop over the token logs of every turn this
parser is parsing, and ONE round trip for the events of all of an iteration's plain steps.

    ts:s:{a}:tok ──┐  WakeableRead: one read of                   ┌─> plain steps: their publishes in one pipeline
    ts:s:{b}:tok ──┼── the logs that changed ──> turn.take(entries)┤
    ts:s:{c}:tok ──┘                                              └─> other steps: the turn's own ordered task

Contracts:

* **In order, none twice.**  Each turn is read from its own cursor (``TurnParse.after``).  While
  a turn's ordered task (``TurnParse.finish``: calls, the turn's end) runs, the turn is left out
  of the read; when the task is done and the turn goes on, the reader is woken to take it back.
* **One turn per token log.**  A second parse of the same session (a newer attempt, the next
  turn) waits until the first one leaves, then starts from its own ``after``.
* **A turn ended elsewhere stops.**  A turn whose token end never comes (its decode job failed
  for good, a cancel, an expired record) is found by a sweep of the turns idle for ``sweep_s``
  and leaves with no error (``TurnParse.ended_elsewhere``).
* **One server or a cluster.**  The read is a ``bus.WakeableRead``: a tracked connection per
  server or master (``runtime.tracked_reads``: a read names the token logs that changed) with an
  in-process wake, and on a cluster a master failing over holds its logs until the replica that
  took over serves them; a server that refuses tracking gets one blocking XREAD over every token
  log and the wake stream (``ts:parse:wake:{me}``).
* **A failure is the turn's own.**  An exception in a turn's parse or ordered task fails that
  turn: ``parse`` raises it to the consumer.  Redis unreachable fails every turn of the read or
  the round trip that failed; their jobs stay pending and are taken over, replaying the turn
  from its token log after what it had published (``TurnParse`` says how).
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis

from runtime import bus
from workers.parser.turn_parse import Step, TurnParse

log = logging.getLogger(__name__)


class TokenReader:
    """Feeds every turn of this parser from one read loop (see the module doc)."""

    def __init__(self, r: aioredis.Redis, reader: aioredis.Redis, batcher: bus.Batcher, wake_key: str,
                 block_ms: int = 5000, count: int = 512, sweep_s: float = 5.0) -> None:
        self.batcher = batcher
        self.sweep_s = sweep_s
        self._next_sweep = time.monotonic() + sweep_s
        self._read = bus.WakeableRead(reader, r, wake_key, count, block_ms)
        self.active: dict[str, TurnParse] = {}  # token-log stream -> the turn read from it
        self.waiting: dict[str, list[TurnParse]] = {}  # further turns of the same log, in arrival order
        self.busy: set[str] = set()  # streams whose turn's ordered task is running
        self._tasks: set[asyncio.Task] = set()

    async def parse(self, turn: TurnParse) -> None:
        """Parse ``turn`` until it is over; raises what failed it."""
        try:  # from the moment it is registered: a turn that fails to start must leave too
            if turn.stream in self.active:
                self.waiting.setdefault(turn.stream, []).append(turn)
            else:
                self.active[turn.stream] = turn
                await self._read.wake()
            await turn.done
        finally:
            self._leave(turn)

    def _leave(self, turn: TurnParse) -> None:
        """Forget ``turn`` (idempotent); the next turn waiting for its log takes its place."""
        waiting = self.waiting.get(turn.stream, [])
        if turn in waiting:
            waiting.remove(turn)
        if self.active.get(turn.stream) is not turn:
            return
        del self.active[turn.stream]
        self.busy.discard(turn.stream)
        if waiting:
            self.active[turn.stream] = waiting.pop(0)
            self._spawn(self._read.wake())
        if not waiting:
            self.waiting.pop(turn.stream, None)

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        try:
            while True:
                try:
                    await self._once()
                    await self._sweep()
                except bus.REDIS_DOWN as exc:
                    log.warning("parser: redis unavailable (%s); failing %d turns for a retry", exc, len(self.active))
                    self._fail_all(exc)
                    await asyncio.sleep(0.5)
        finally:
            for task in self._tasks:
                task.cancel()
            await self._read.close()

    async def _once(self) -> None:
        reading = {s: t for s, t in self.active.items() if s not in self.busy and not t.done.done()}
        by_stream: dict[str, list[bus.Entry]] = {}
        for entry in await self._read.read({s: t.after for s, t in reading.items()}):
            by_stream.setdefault(entry.stream, []).append(entry)
        plain: list[tuple[TurnParse, Step]] = []
        for stream, entries in by_stream.items():
            turn = reading[stream]
            if self.active.get(stream) is not turn or stream in self.busy or turn.done.done():
                continue  # left (or replaced) while the read was in flight: read from its cursor, not the new one's
            try:
                step = turn.take(entries)
            except Exception as exc:  # the turn's own failure (a parser bug): its job's boundary handles it
                self._fail(turn, exc)
                continue
            if not step.plain:
                self.busy.add(stream)
                self._spawn(self._finish(turn, step))
            elif turn.unpublished(step):
                plain.append((turn, step))
        await self._publish(plain)

    async def _sweep(self) -> None:
        """Every ``sweep_s``: the turns idle that long that ended elsewhere are over."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + self.sweep_s
        idle = [t for s, t in self.active.items()
                if s not in self.busy and not t.done.done() and now - t.seen >= self.sweep_s]
        for turn, over in zip(idle, await asyncio.gather(*(t.ended_elsewhere() for t in idle)), strict=True):
            if over and not turn.done.done():
                turn.done.set_result(None)

    async def _publish(self, plain: list[tuple[TurnParse, Step]]) -> None:
        """Every plain step's events in one round trip (one XADD per event)."""
        if not plain:
            return
        owners: list[int] = []  # the plain step of each XADD
        calls = []
        for i, (turn, step) in enumerate(plain):
            for call in turn.append_calls(step):
                owners.append(i)
                calls.append(call)
        failed: dict[int, BaseException] = {}
        for i, reply in zip(owners, await self.batcher.submit_many(calls) if calls else [], strict=True):
            if isinstance(reply, BaseException):
                failed.setdefault(i, reply)
        for i, (turn, step) in enumerate(plain):
            if i in failed:
                self._fail(turn, failed[i])  # its job is retried: the replay starts after what went out
            else:
                turn.published_to(step)

    async def _finish(self, turn: TurnParse, step: Step) -> None:
        """A step that is not plain, in the turn's own task; the turn rejoins the read unless it is over."""
        try:
            over = await turn.finish(step)
        except Exception as exc:  # TurnSuperseded, redis, a bug: the turn's job decides what it means
            self._fail(turn, exc)
            return
        if over:
            if not turn.done.done():
                turn.done.set_result(None)
            return
        self._release(turn)
        await self._read.wake()

    def _release(self, turn: TurnParse) -> None:
        """The log of ``turn`` is read again -- unless ``turn`` failed meanwhile and another turn of
        the same log (its job's retry) took its place: that one's own ordered step holds the log."""
        if self.active.get(turn.stream) is turn:
            self.busy.discard(turn.stream)

    def _fail(self, turn: TurnParse, exc: BaseException) -> None:
        self._release(turn)
        if not turn.done.done():
            turn.done.set_exception(exc)

    def _fail_all(self, exc: BaseException) -> None:
        for turn in list(self.active.values()):
            self._fail(turn, exc)

    def _spawn(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
