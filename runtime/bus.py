"""Redis Streams helpers shared by every worker.

Entries carry one field, ``d``: the msgpack bytes of a schema message.  Consumers read
with ``XREADGROUP ... BLOCK`` (no polling), ack only after their output is written, and
take over a dead consumer's pending entries with ``XAUTOCLAIM``.  Undecodable entries go
to ``ts:dead`` and are acked, never crashing the reader.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import redis.asyncio as aioredis
from redis._parsers.hiredis import _AsyncHiredisParser
from redis.exceptions import (ClusterError, NoScriptError, ResponseError, SlotNotCoveredError,
                               TryAgainError)

from runtime import cluster, mux
from runtime.tracked_reads import ClusterReads, ServerTrackedReads, TrackingRefused
from schemas import keys

log = logging.getLogger(__name__)

FIELD = b"d"
EVENT_STREAM_MAXLEN = 100_000
TOKEN_STREAM_MAXLEN = 50_000
JOB_STREAM_MAXLEN = 100_000

RETRY_S = 0.2  # between tries of a call interrupted by an unreachable broker
OUTAGE_S = 15.0  # how long a decoder retries its token-log writes while redis is unreachable (a cluster
# failover, a restart) before it abandons the turn, which is then regenerated as a new attempt

# The broker is unreachable or moving (a cluster master failing over): retry, never a job's failure.
# NOSCRIPT past redis-py's (and the Batcher's) own reload is one too: a just-promoted replica has no
# scripts (they are not replicated), and a reload sent by a stale slot map missed it.
REDIS_DOWN: tuple[type[BaseException], ...] = (aioredis.ConnectionError, aioredis.TimeoutError, ClusterError,
                                               TryAgainError, SlotNotCoveredError, NoScriptError)


class Entry(NamedTuple):
    stream: str
    id: str
    data: bytes
    deliveries: int = 1  # > 1 when reclaimed from another consumer


async def through_outage(call: Callable[[], Awaitable[Any]], for_s: float, what: str = "") -> Any:
    """``await call()``, again every ``RETRY_S`` while the broker is unreachable (a cluster failover,
    a restart), for up to ``for_s`` seconds; then its error.  Only for calls that may run twice."""
    deadline = time.monotonic() + for_s
    while True:
        try:
            return await call()
        except REDIS_DOWN as exc:
            if time.monotonic() >= deadline:
                raise
            log.warning("%s: redis unavailable (%s); retrying", what or "write", exc)
            await asyncio.sleep(RETRY_S)


class _HiredisPacking:
    """Packs commands with hiredis (C), as redis-py's sync client does; its asyncio connection packs
    them in Python, several times slower (a command per token per stage is packed)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        return [mux.pack(args)]


_CONNECTIONS = {cls: type(f"Hiredis{cls.__name__}", (_HiredisPacking, cls), {})
                for cls in (aioredis.Connection, aioredis.SSLConnection, aioredis.UnixDomainSocketConnection)}


def _hiredis(cls: type) -> type:
    """``cls`` packing with hiredis (redis-py's own connection classes; any other as it is)."""
    return _CONNECTIONS.get(cls, cls)


POOL_CONNECTIONS = 32  # a process's connections to one server at most: more commands at once wait their turn


class _QuickPool(aioredis.ConnectionPool):
    """redis-py's connection pool, bounded, without the per-command cost where nothing can be wrong.

    redis-py 5 makes every command and every pipeline take the pool's lock, then try a read with
    a zero timeout on the connection it hands out, to catch a reply left unread or a socket the
    server closed: the timeout fires and cancels the read, and the lock holds every concurrent
    command behind those loop iterations; each release dispatches an event whose one listener
    re-authenticates a connection that holds a new token.  Here a connected connection whose
    hiredis reader and stream buffer hold nothing and whose stream is not at its end is handed
    out at once (no reply can be left behind either: redis-py disconnects a connection whose
    read was interrupted); any other goes through redis-py's check (verify, reconnect) under its
    lock, and a release with a token to present goes through redis-py's event.

    Without that lock nothing paced a burst of commands, and each opened a connection of its own
    (450 of them in ``bench load`` at S = 300, against ~100): at most ``max_connections`` are
    open here, and a command beyond them waits for the next one released, first come first served."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiters: collections.deque[asyncio.Future] = collections.deque()

    async def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        if self._available_connections or len(self._in_use_connections) < self.max_connections:
            conn = self.get_available_connection()
        else:
            conn = await self._wait()
        if _quiet(conn):
            return conn
        async with self._lock:
            try:
                await self.ensure_connection(conn)
            except BaseException:
                await self.release(conn)
                raise
        return conn

    async def _wait(self) -> Any:
        """The next connection released (handed over still counted in use)."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            return await fut
        except BaseException:
            if fut.done() and not fut.cancelled():  # handed over as the caller left: pass it on
                await self.release(fut.result())
            raise

    async def release(self, connection: Any) -> None:
        if getattr(connection, "_re_auth_token", None) is not None:
            await connection.re_auth()
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(connection)
                return
        self._in_use_connections.discard(connection)
        self._available_connections.append(connection)


def _quiet(conn: Any) -> bool:
    """A connected hiredis connection with nothing buffered, its socket not closed by the server."""
    parser = getattr(conn, "_parser", None)
    if not conn.is_connected or not isinstance(parser, _AsyncHiredisParser) or parser._reader is None:
        return False
    stream = parser._stream
    return stream is not None and not stream._buffer and not stream.at_eof() and stream.exception() is None \
        and not parser._reader.has_data()


def connect(url: str) -> aioredis.Redis:
    """An asyncio client with raw bytes replies (payloads are msgpack or JSON) that packs with hiredis,
    whose commands that return at once share one connection (``runtime.mux``; blocking reads use the
    pool); a ``RedisCluster`` for a ``redis+cluster://`` URL (``runtime.cluster``), every node connection of
    which packs with hiredis too.  Its XREAD replies are left as the server sent them: ``read_many``
    turns them into entries."""
    if cluster.is_cluster_url(url):
        client = cluster.connect(url, connection=_hiredis)
    else:
        pool = _QuickPool.from_url(url, decode_responses=False, health_check_interval=30,
                                   max_connections=POOL_CONNECTIONS)
        pool.connection_class = _hiredis(pool.connection_class)
        client = mux.MuxRedis.from_pool(pool)
    client.set_response_callback("XREAD", _raw)
    return client  # type: ignore[return-value]


def _raw(response: Any, **options: Any) -> Any:
    return response


def _s(x: bytes | str) -> str:
    return x.decode() if isinstance(x, bytes) else x


async def ensure_group(r: aioredis.Redis, stream: str, group: str, start: str = "0") -> None:
    """Create a consumer group (and the stream) if it does not exist yet."""
    try:
        await r.xgroup_create(stream, group, id=start, mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def publish(r: aioredis.Redis, items: Iterable[tuple[str, bytes]], maxlen: int = EVENT_STREAM_MAXLEN) -> list[str]:
    """XADD many entries in one round trip (pipelined, approximate trimming); returns their ids."""
    pipe = r.pipeline(transaction=False)
    n = 0
    for stream, data in items:
        pipe.execute_command(*xadd(stream, data, maxlen))
        n += 1
    if not n:
        return []
    return [_s(i) for i in await pipe.execute()]


async def add(r: aioredis.Redis, stream: str, data: bytes, maxlen: int = JOB_STREAM_MAXLEN,
              nomkstream: bool = False) -> str:
    """XADD one entry (``nomkstream``: only to a stream that exists)."""
    return _s(await add_to(r, stream, data, maxlen, nomkstream))


def add_to(r: Any, stream: str, data: bytes, maxlen: int = JOB_STREAM_MAXLEN, nomkstream: bool = False) -> Any:
    """``add``'s XADD, on a client (a coroutine) or queued on a pipeline (a ``Batcher``'s build)."""
    return r.execute_command(*xadd(stream, data, maxlen, nomkstream))


def xadd(stream: str, data: bytes, maxlen: int, nomkstream: bool = False) -> tuple[Any, ...]:
    """The XADD of one entry (approximate trimming) as ``execute_command``'s arguments: what redis-py's
    ``xadd`` sends, without assembling it from keyword options for every token."""
    if nomkstream:
        return ("XADD", stream, "NOMKSTREAM", "MAXLEN", "~", maxlen, "*", FIELD, data)
    return ("XADD", stream, "MAXLEN", "~", maxlen, "*", FIELD, data)


def _entries(reply, deliveries: int = 1) -> list[Entry]:
    out: list[Entry] = []
    for stream, rows in reply or []:
        for entry_id, fields in rows:
            if fields is None:  # a pending entry whose message was trimmed
                continue
            out.append(Entry(_s(stream), _s(entry_id), fields.get(FIELD, b""), deliveries))
    return out


class GroupReader:
    """Reads a set of streams as one consumer of one group; blocks instead of polling.

    One blocking XREADGROUP covers the streams one command may name together: all of them on
    one server, those of one slot on a cluster (``runtime.cluster.read_groups``).  With several
    such groups, each has its own read in flight, and ``read`` returns as soon as any of them
    has entries; a read still waiting is kept for the next call, never cancelled (a cancelled
    XREADGROUP could take entries into this consumer's pending list that nobody then handles).
    A group found missing (NOGROUP: a failover lost it) is created again.
    """

    def __init__(self, r: aioredis.Redis, streams: list[str], group: str, consumer: str,
                 count: int = 64, block_ms: int = 1000) -> None:
        self.r, self.streams, self.group, self.consumer = r, list(streams), group, consumer
        self.count, self.block_ms = count, block_ms
        self._groups = cluster.read_groups(r, self.streams)
        self._inflight: dict[int, asyncio.Task] = {}

    async def setup(self) -> None:
        for stream in self.streams:
            await ensure_group(self.r, stream, self.group)

    async def read(self) -> list[Entry]:
        """New entries for this consumer; waits up to ``block_ms``."""
        if len(self._groups) == 1:
            return await self._read(self._groups[0])
        for i, streams in enumerate(self._groups):
            if i not in self._inflight:
                self._inflight[i] = asyncio.create_task(self._read(streams))
        done, _ = await asyncio.wait(self._inflight.values(), return_when=asyncio.FIRST_COMPLETED)
        out: list[Entry] = []
        error: BaseException | None = None
        for i, task in list(self._inflight.items()):
            if task in done:
                del self._inflight[i]
                if task.exception() is None:
                    out.extend(task.result())
                else:
                    error = error or task.exception()
        if error is not None and not out:
            raise error  # the caller retries; entries another read took are handled first, never dropped
        return out

    async def _read(self, streams: list[str]) -> list[Entry]:
        try:
            reply = await self.r.xreadgroup(self.group, self.consumer, {s: ">" for s in streams},
                                            count=self.count, block=self.block_ms)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # the group is gone: a failover lost it (created on a master killed before its replica had it),
            # or the stream was deleted.  Created again from the start; consumers drop what they have seen.
            log.warning("group %s of %s lost (%s); created again", self.group, streams, exc)
            for stream in streams:
                await ensure_group(self.r, stream, self.group)
            return []
        return _entries(reply)

    def close(self) -> None:
        """Cancel the reads in flight (the consumer is stopping)."""
        for task in self._inflight.values():
            task.cancel()
        self._inflight.clear()

    async def reclaim(self, min_idle_ms: int) -> list[Entry]:
        """Take over entries another consumer read but did not ack for ``min_idle_ms``."""
        out: list[Entry] = []
        for stream in self.streams:
            start = "0-0"
            while True:
                reply = await self.r.xautoclaim(stream, self.group, self.consumer, min_idle_ms,
                                                start_id=start, count=self.count)
                start, rows = _s(reply[0]), reply[1]
                out.extend(_entries([(stream, rows)], deliveries=2))
                if start == "0-0" or not rows:
                    break
        return out

    async def ack(self, entry: Entry, delete: bool = False) -> None:
        """Acknowledge ``entry``; with ``delete``, remove it from its stream in the same round trip."""
        if not delete:
            await self.r.xack(entry.stream, self.group, entry.id)
            return
        pipe = self.r.pipeline(transaction=False)  # one stream: one slot
        for build in self.ack_calls(entry, delete):
            build(pipe)
        await pipe.execute()

    def ack_calls(self, entry: Entry, delete: bool = False) -> list[Callable[[Any], Any]]:
        """``ack``'s commands, each queued by one build, for a caller that sends them in a round trip of its own."""
        calls: list[Callable[[Any], Any]] = [lambda pipe: pipe.xack(entry.stream, self.group, entry.id)]
        if delete:
            calls.append(lambda pipe: pipe.xdel(entry.stream, entry.id))
        return calls


async def dead_letter(r: aioredis.Redis, entry: Entry, reason: str, group: str | None = None) -> None:
    """Park an undecodable or poison entry in ``ts:dead`` and ack it so it is never re-read."""
    log.warning("dead-letter %s %s: %s", entry.stream, entry.id, reason)
    fields = {b"stream": entry.stream, b"id": entry.id, b"reason": reason[:2000], FIELD: entry.data,
              b"t": repr(time.time())}
    await r.xadd(keys.DEAD, fields, maxlen=JOB_STREAM_MAXLEN, approximate=True)
    if group:
        await r.xack(entry.stream, group, entry.id)


async def get_each(r: aioredis.Redis, names: list[str] | list[bytes]) -> list[bytes | None]:
    """GET every key in one round trip: a pipeline, not one MGET (on a cluster the keys span slots)."""
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.get(name)
    return await pipe.execute() if names else []


async def last_id(r: aioredis.Redis, stream: str) -> str:
    """Id of the newest entry of a stream, or ``0-0``."""
    rows = await r.xrevrange(stream, count=1)
    return _s(rows[0][0]) if rows else "0-0"


async def read_many(r: aioredis.Redis, streams: Mapping[str, str], count: int = 256,
                    block_ms: int | None = None) -> list[Entry]:
    """Entries of many streams, each after its own id, in ONE plain XREAD (no group); waits up to
    ``block_ms`` for the first when given.  Every multi-stream read of one server goes through here.

    On a cluster one command names the keys of one slot: streams of several slots are read with an
    XREAD per slot, in one pipeline, and such a read cannot wait (a blocking read of many sessions'
    streams on a cluster is ``WakeableRead``, through ``many_reader``)."""
    if not streams:
        return []
    if cluster.is_cluster(r):
        groups = cluster.read_groups(r, streams)
        if len(groups) > 1:
            return await _read_slots(r, streams, groups, count, block_ms)
    return _xread_entries(await r.xread(dict(streams), count=count, block=block_ms))


async def _read_slots(r: aioredis.Redis, streams: Mapping[str, str], groups: list[list[str]], count: int,
                      block_ms: int | None) -> list[Entry]:
    if block_ms is not None:
        raise ValueError(f"a blocking read of {len(streams)} streams over {len(groups)} cluster slots: "
                         "use WakeableRead (many_reader)")
    pipe = r.pipeline(transaction=False)
    for group in groups:
        pipe.xread({s: streams[s] for s in group}, count=count)
    return [e for reply in await pipe.execute() for e in _xread_entries(reply)]


def _xread_entries(reply: Any) -> list[Entry]:
    """The entries of an XREAD reply, raw (``connect``'s clients) or parsed by redis-py."""
    if reply and isinstance(reply[0][1][0][1], dict):  # a client that parses XREAD replies itself
        return _entries(reply)
    out = []
    for stream, rows in reply or ():
        name = stream.decode()
        for entry_id, fields in rows:  # fields: [name, value, ...]; ours carry one, ``d``
            data = fields[1] if fields[0] == FIELD else dict(zip(fields[::2], fields[1::2])).get(FIELD, b"")
            out.append(Entry(name, entry_id.decode(), data))
    return out


def _fields(fields: Any) -> dict[bytes, bytes]:
    """An entry's fields as a dict, from a raw (``[name, value, ...]``) or a parsed reply."""
    return fields if isinstance(fields, dict) else dict(zip(fields[::2], fields[1::2]))


async def tail(r: aioredis.Redis, stream: str, after: str, block_ms: int = 1000, count: int = 256) -> list[Entry]:
    """Entries of one stream after ``after``; waits up to ``block_ms``."""
    return await read_many(r, {stream: after}, count, block_ms)


WAKE_TTL_S = 86_400  # a wake stream's TTL, renewed every hour by the wakes


class WakeableRead:
    """ONE read over a changing set of streams, which ``wake()`` interrupts.

    By default through ``many_reader``: a reader connection the server tells, through a listener,
    which streams changed since it read them (``runtime.tracked_reads``), so a read names only
    those, and a wake ends its wait in this process: no wake stream.  On one server that refuses
    client tracking (an ACL without ``CLIENT``; said once in the log), or with ``tracked=False``:
    ONE blocking ``read_many`` over the streams and the wake stream (``wake_key``, this reader's
    own), which is part of every read from an explicit cursor, so a wake sent between two reads is
    never lost: the next read returns at once and the caller re-issues it with its current streams.
    At most one wake is in flight: every wake sent before a read was built is served by that read.
    A cluster's reads are always tracked (one XREAD cannot span slots).
    """

    def __init__(self, reader: aioredis.Redis, r: aioredis.Redis, wake_key: str, count: int = 512,
                 block_ms: int = 5000, batcher: Batcher | None = None, tracked: bool = True) -> None:
        self.reader, self.r, self.wake_key = reader, r, wake_key  # ``reader``: this loop's own client
        self.count, self.block_ms = count, block_ms
        self.batcher = batcher or Batcher(r)  # a shared one: a wake leaves with the others' commands
        self._cursor = "0-0"
        self._waking = False
        self._refresh_at = 0.0  # when the wake stream's TTL is next renewed (with a wake)
        self._tracked = many_reader(reader) if tracked or cluster.is_cluster(reader) else None

    @property
    def tracked(self) -> bool:
        """Whether reads are tracked now (see the class doc)."""
        return self._tracked is not None

    async def read(self, streams: Mapping[str, str]) -> list[Entry]:
        """The entries of ``streams`` (stream -> after id) that arrived; returns early on a wake.
        Build ``streams`` in the same step as this call (no await between): that is the hand-over."""
        if self._tracked is not None:
            try:
                got = await self._tracked.read(streams, self.count, self.block_ms)
            except TrackingRefused as exc:
                log.warning("%s; reading with a blocking XREAD instead", exc)
                tracked, self._tracked = self._tracked, None
                await tracked.aclose()
                return []  # early: the caller's next read blocks, from its current streams
            return [Entry(stream, _s(eid), fields.get(FIELD, b"")) for stream, rows in got for eid, fields in rows]
        self._waking = False  # a wake from here on interrupts this read
        got = await read_many(self.reader, {self.wake_key: self._cursor, **streams}, self.count, self.block_ms)
        out = []
        for entry in got:
            if entry.stream == self.wake_key:
                self._cursor = entry.id
            else:
                out.append(entry)
        return out

    async def wake(self) -> None:
        """Make the blocked read return, so that the next one includes the current streams."""
        if not self._to_send():
            return
        try:
            await asyncio.gather(*self._submit_wake())
        except REDIS_DOWN as exc:
            self._not_sent(exc)

    def wake_nowait(self) -> None:
        """``wake`` without waiting for it: the wake leaves in the batcher's next round trip, with
        whatever the caller submits next."""
        if self._to_send():
            for fut in self._submit_wake():
                fut.add_done_callback(self._sent)

    def _to_send(self) -> bool:
        """Whether a wake must be sent now: not on a cluster (the tracked wait ends here, at once), not
        while one is in flight (the read it wakes takes every stream watched by then)."""
        if self._tracked is not None:
            self._tracked.wake()
            return False
        if self._waking:
            return False
        self._waking = True
        return True

    def _submit_wake(self) -> list[asyncio.Future]:
        sent = [self.batcher.submit(lambda p: p.xadd(self.wake_key, {b"w": b"1"}, maxlen=16, approximate=True))]
        if (now := time.monotonic()) >= self._refresh_at:  # the stream outlives a dead reader by a day at most
            self._refresh_at = now + WAKE_TTL_S / 24
            sent.append(self.batcher.submit(lambda p: p.expire(self.wake_key, WAKE_TTL_S)))
        return sent

    def _sent(self, fut: asyncio.Future) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if isinstance(exc, REDIS_DOWN):
            self._not_sent(exc)
        elif exc is not None:
            log.warning("wake of %s failed: %r", self.wake_key, exc)

    def _not_sent(self, exc: BaseException) -> None:
        # Not the caller's failure: the read fails with the server too and the next one is built
        # from the current streams (or, its own connection alive, returns within ``block_ms``).
        # The next wake is sent again.
        self._waking = False
        log.info("wake of %s not sent (%s): the next read takes the new streams", self.wake_key, exc)

    async def close(self) -> None:
        if self._tracked is not None:
            await self._tracked.aclose()
        else:
            await self.r.delete(self.wake_key)


class ServerReads:
    """New entries of many streams after their cursors, on one server: one blocking XREAD."""

    connections = 1

    def __init__(self, r: aioredis.Redis) -> None:
        self.r = r

    async def read(self, streams: dict[str, str], count: int, block_ms: int) -> list[tuple[str, list]]:
        reply = await self.r.xread(streams, count=count, block=block_ms)
        return [(_s(stream), [(eid, _fields(f)) for eid, f in rows]) for stream, rows in reply or []]

    async def aclose(self) -> None:
        pass


def many_reader(r: aioredis.Redis, tracked: bool = True) -> Any:
    """The reader of many streams' new entries after the caller's cursors (XREAD, no group), for
    one task: ``await reader.read({stream: cursor}, count, block_ms) -> [(stream, [(id, fields)])]``
    (``fields`` a dict), blocking until one of them has entries.  Tracked (``runtime.tracked_reads``:
    a reader and a listener per server or master; a read names only the streams that changed, and
    ``wake()`` ends its wait): on one server ``ServerTrackedReads``, which raises ``TrackingRefused``
    when the server does not allow it, on a cluster ``ClusterReads``.  ``tracked=False``, one server
    only: one blocking XREAD over every stream (``ServerReads``)."""
    if cluster.is_cluster(r):
        return ClusterReads(r)
    return ServerTrackedReads(r) if tracked else ServerReads(r)


@dataclass(frozen=True)
class ScriptCall:
    """One run of a registered Lua script, queued by its sha: a pipeline that holds it sends no
    SCRIPT EXISTS first (redis-py does for ``Script`` objects); ``Batcher`` loads it on NOSCRIPT.
    Queued as a raw EVALSHA, which a cluster pipeline takes too (redis-py refuses its ``evalsha``)."""

    script: Any  # a redis-py (Async)Script, from ``register_script``
    keys: list[Any]
    args: list[Any]

    def __call__(self, pipe: Any) -> Any:
        return pipe.execute_command("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)

    def with_text(self, pipe: Any) -> Any:
        """The same run queued as EVAL with the script's text: it never meets NOSCRIPT, so a command
        queued after it in the pipeline never runs without it (one more kilobyte sent)."""
        return pipe.execute_command("EVAL", self.script.script, len(self.keys), *self.keys, *self.args)


class Batcher:
    """Sends the commands that many tasks issue in one pipelined round trip.

    ``await call(build)`` (or ``submit(build)``, a future): ``build(pipe)`` queues exactly one
    command on a pipeline -- a ``ScriptCall`` runs a script -- and its reply is returned (its
    error raised); ``submit_many(builds)`` queues several, with one future for all their replies.
    Commands issued while a round trip is in flight leave together in the next
    one: under load one write serves many sessions; when idle a command leaves at once, with no
    added delay.  A script the server does not know (restarted, flushed, a new cluster master) is
    loaded and re-run.
    """

    def __init__(self, r: aioredis.Redis) -> None:
        self.r = r
        self._queue: list[tuple[tuple[Callable[[Any], Any], ...], asyncio.Future, bool]] = []
        self._task: asyncio.Task | None = None

    def submit(self, build: Callable[[Any], Any]) -> asyncio.Future:
        """Queue ``build`` for the next round trip; the future gets its reply."""
        return self._submit((build,), False)

    def submit_many(self, builds: list[Callable[[Any], Any]]) -> asyncio.Future:
        """Queue ``builds`` for the next round trip, together; the future gets the list of their replies,
        in order, each the command's reply or its error (never raised): one future for many commands."""
        return self._submit(tuple(builds), True)

    def _submit(self, builds: tuple[Callable[[Any], Any], ...], many: bool) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((builds, fut, many))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        return fut

    async def call(self, build: Callable[[Any], Any]) -> Any:
        return await self.submit(build)

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            builds = [build for group, _, _ in batch for build in group]
            try:
                replies = await self._round_trip(builds)
            except Exception as exc:  # a connection-level failure: every caller of the batch gets it
                replies = [exc] * len(builds)
            i = 0
            for group, fut, many in batch:
                mine, i = replies[i:i + len(group)], i + len(group)
                if fut.done():  # its caller was cancelled
                    continue
                if many:
                    fut.set_result(mine)
                elif isinstance(mine[0], Exception):
                    fut.set_exception(mine[0])
                else:
                    fut.set_result(mine[0])

    async def _round_trip(self, builds: list[Callable[[Any], Any]], retry: bool = True) -> list[Any]:
        pipe = self.r.pipeline(transaction=False)
        for build in builds:
            queued = build(pipe)
            if inspect.iscoroutine(queued):  # redis-py Script objects queue themselves asynchronously (never
                await queued  # await a cluster pipeline itself: that empties it)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except AttributeError as exc:  # redis-py 5: a cluster pipeline whose client re-initialized its
            raise aioredis.ConnectionError(f"cluster topology changed mid-pipeline ({exc})") from exc  # nodes
        if len(replies) != len(builds):
            raise RuntimeError(f"batcher: {len(builds)} commands queued but {len(replies)} replies")
        unknown = [i for i, (b, rep) in enumerate(zip(builds, replies)) if isinstance(b, ScriptCall)
                   and isinstance(rep, NoScriptError)]  # a server restarted or flushed, a new cluster master
        if unknown and retry:
            for src in {builds[i].script.script for i in unknown}:  # type: ignore[attr-defined]
                await self.r.script_load(src)  # on a cluster: on every master
            again = await self._round_trip([builds[i] for i in unknown], retry=False)
            for i, reply in zip(unknown, again, strict=True):
                replies[i] = reply
        return replies
