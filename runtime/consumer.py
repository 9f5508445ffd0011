"""One consumer loop for every job stream: read, hand each entry to a handler, ack, lease, reclaim.

    ┌─ read loop ───── XREADGROUP BLOCK ──> spawn(entry) ──> handler.handle(entry) ─┐
    │                                                            Done.ACK   -> XACK (+ XDEL)
    │                                                            Done.ACKED -> (the handler sent them)
    │                                                            Done.LEAVE -> pending (retried)
    └─ lease loop ──── every lease_s: XCLAIM our in-flight entries (idle time 0), then
                       XAUTOCLAIM entries idle > reclaim_idle_ms (their consumer died) -> spawn

Every path of one entry, in the order they are checked:

* the handler returns ``Done.ACK``: acked (and deleted where ``delete_acked(stream)``);
* it returns ``Done.ACKED``: it sent those commands itself (``ack_calls``), behind its last write in
  the same round trip on one connection, so that they never run before it;
* it returns ``Done.LEAVE``: left pending; a live consumer holds it, or it is retried later;
* ``UndecodableEntry``: dead-lettered (``ts:dead``) and acked, never retried;
* Redis unreachable (or a cluster master failing over): kept in flight (leased) and handled
  again ``RETRY_S`` later, until it goes through;
* any other exception: logged once, dead-lettered, and the entry's session fails with an
  ``error`` event (``Turns.fail``) -- the worker goes on with every other session.

In-flight entries are leased: the owner resets their idle time every ``lease_s``, so only a
dead consumer's entries go idle and are taken over.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol


from runtime import bus
from runtime.turns import Turns
from schemas.codec import UndecodableEntry

log = logging.getLogger(__name__)

REDIS_DOWN = bus.REDIS_DOWN
RETRY_S = 0.5  # an entry interrupted by redis (down, failing over) is handled again this much later


class Done(enum.Enum):
    ACK = "ack"
    ACKED = "acked"
    LEAVE = "leave"


class Handler(Protocol):
    async def handle(self, entry: bus.Entry) -> Done: ...


class Consumer:
    """Runs one group reader's entries through a handler (see the module doc)."""

    def __init__(self, name: str, reader: bus.GroupReader, handler: Handler, turns: Turns, *,
                 lease_s: float, reclaim_idle_ms: int,
                 delete_acked: Callable[[str], bool] = lambda stream: False) -> None:
        self.name, self.reader, self.handler, self.turns = name, reader, handler, turns
        self.lease_s, self.reclaim_idle_ms, self.delete_acked = lease_s, reclaim_idle_ms, delete_acked
        self.inflight: dict[tuple[str, str], bus.Entry] = {}  # (stream, id): two streams can give one id
        self._tasks: set[asyncio.Task] = set()

    async def run(self, stop: asyncio.Event, also: Iterable[Callable[[], Awaitable[None]]] = ()) -> None:
        """Consume until ``stop`` is set; ``also``: more periodic loops of the worker, run alongside."""
        await self.reader.setup()
        loops = [asyncio.create_task(f()) for f in (self._read_loop, self._lease_loop, *also)]
        await stop.wait()
        self.reader.close()
        for t in loops + list(self._tasks):
            t.cancel()
        await asyncio.gather(*loops, *self._tasks, return_exceptions=True)

    async def _read_loop(self) -> None:
        while True:
            try:
                for entry in await self.reader.read():
                    self.spawn(entry)
            except REDIS_DOWN as exc:
                log.warning("%s: redis unavailable (%s); retrying", self.name, exc)
                await asyncio.sleep(0.5)
            except Exception:  # the reader's outermost loop: a dead read loop would stop the worker silently
                log.exception("%s: read failed; retrying", self.name)
                await asyncio.sleep(0.5)

    async def _lease_loop(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s)
            try:
                await self.renew_leases()
                for entry in await self.reader.reclaim(self.reclaim_idle_ms):
                    log.info("%s: took over %s %s", self.name, entry.stream, entry.id)
                    self.spawn(entry)
            except REDIS_DOWN as exc:
                log.warning("%s: lease renewal failed: %s", self.name, exc)

    async def renew_leases(self) -> None:
        """Reset the idle time of in-flight entries so live work is never reclaimed."""
        by_stream: dict[str, list[str]] = {}
        for e in self.inflight.values():
            by_stream.setdefault(e.stream, []).append(e.id)
        for stream, ids in by_stream.items():
            await self.reader.r.xclaim(stream, self.reader.group, self.reader.consumer, 0, ids, justid=True)

    def ack_calls(self, entry: bus.Entry) -> list[Callable[[Any], Any]]:
        """The commands that ack ``entry`` as this consumer does on ``Done.ACK`` (each queued by one build)."""
        return self.reader.ack_calls(entry, delete=self.delete_acked(entry.stream))

    def spawn(self, entry: bus.Entry) -> None:
        """Handle ``entry`` in its own task, unless it is already in flight here."""
        key = (entry.stream, entry.id)
        if key in self.inflight:
            return
        self.inflight[key] = entry
        self._start(self._run(entry))

    def _start(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _retry(self, entry: bus.Entry) -> None:
        """Handle ``entry`` again after ``RETRY_S`` (it stays in flight here, its lease renewed)."""
        await asyncio.sleep(RETRY_S)
        await self._run(entry)

    async def _run(self, entry: bus.Entry) -> None:
        again = False
        try:
            if await self.handler.handle(entry) is Done.ACK:
                await self.reader.ack(entry, delete=self.delete_acked(entry.stream))
        except UndecodableEntry as exc:
            await bus.dead_letter(self.reader.r, entry, str(exc), self.reader.group)
        except asyncio.CancelledError:
            raise
        except REDIS_DOWN as exc:
            log.warning("%s: %s %s interrupted by redis (%s); retrying in %.1f s", self.name,
                        entry.stream, entry.id, exc, RETRY_S)
            again = True
        except Exception as exc:  # the worker's outermost boundary: log, dead-letter, go on
            log.exception("%s: %s %s failed", self.name, entry.stream, entry.id)
            await bus.dead_letter(self.reader.r, entry, f"{type(exc).__name__}: {exc}", self.reader.group)
            await self.turns.fail(entry, f"{self.name} failed: {type(exc).__name__}: {exc}")
        finally:
            if again:
                self._start(self._retry(entry))
            else:
                self.inflight.pop((entry.stream, entry.id), None)
