"""Redis Streams helpers shared by every worker.

Entries carry one field, ``d``: the msgpack bytes of a schema message.  Consumers read
with ``XREADGROUP ... BLOCK`` (no polling), ack only after their output is written, and
take over a dead consumer's pending entries with ``XAUTOCLAIM``.  Undecodable entries go
to ``ts:dead`` and are acked, never crashing the reader.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import hiredis
import redis.asyncio as aioredis
from redis.exceptions import DataError, NoScriptError, ResponseError

from schemas import keys

log = logging.getLogger(__name__)

FIELD = b"d"
EVENT_STREAM_MAXLEN = 100_000
TOKEN_STREAM_MAXLEN = 50_000
JOB_STREAM_MAXLEN = 100_000


class Entry(NamedTuple):
    stream: str
    id: str
    data: bytes
    deliveries: int = 1  # > 1 when reclaimed from another consumer


class _HiredisPacking:
    """Packs commands with hiredis (C), as redis-py's sync client does; its asyncio connection packs
    them in Python, several times slower (a command per token per stage is packed)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str):  # a command of several words ("SCRIPT LOAD"): sent as separate words
            args = tuple(args[0].encode().split()) + args[1:]
        elif b" " in args[0]:
            args = tuple(args[0].split()) + args[1:]
        try:
            return [hiredis.pack_command(args)]
        except TypeError as exc:
            raise DataError(str(exc)) from None


_CONNECTIONS = {cls: type(f"Hiredis{cls.__name__}", (_HiredisPacking, cls), {})
                for cls in (aioredis.Connection, aioredis.SSLConnection, aioredis.UnixDomainSocketConnection)}


def connect(url: str) -> aioredis.Redis:
    """An asyncio client with raw bytes replies (payloads are msgpack or JSON) that packs with hiredis.
    Its XREAD replies are left as the server sent them: ``read_many`` turns them into entries."""
    client = aioredis.Redis.from_url(url, decode_responses=False, health_check_interval=30)
    pool = client.connection_pool
    pool.connection_class = _CONNECTIONS.get(pool.connection_class, pool.connection_class)
    client.set_response_callback("XREAD", _raw)
    return client


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
        pipe.xadd(stream, {FIELD: data}, maxlen=maxlen, approximate=True)
        n += 1
    if not n:
        return []
    return [_s(i) for i in await pipe.execute()]


async def add(r: aioredis.Redis, stream: str, data: bytes, maxlen: int = JOB_STREAM_MAXLEN) -> str:
    """XADD one entry."""
    return _s(await r.xadd(stream, {FIELD: data}, maxlen=maxlen, approximate=True))


def _entries(reply, deliveries: int = 1) -> list[Entry]:
    out: list[Entry] = []
    for stream, rows in reply or []:
        for entry_id, fields in rows:
            if fields is None:  # a pending entry whose message was trimmed
                continue
            out.append(Entry(_s(stream), _s(entry_id), fields.get(FIELD, b""), deliveries))
    return out


class GroupReader:
    """Reads a set of streams as one consumer of one group; blocks instead of polling."""

    def __init__(self, r: aioredis.Redis, streams: list[str], group: str, consumer: str,
                 count: int = 64, block_ms: int = 1000) -> None:
        self.r, self.streams, self.group, self.consumer = r, list(streams), group, consumer
        self.count, self.block_ms = count, block_ms

    async def setup(self) -> None:
        for stream in self.streams:
            await ensure_group(self.r, stream, self.group)

    async def read(self) -> list[Entry]:
        """New entries for this consumer; waits up to ``block_ms``."""
        reply = await self.r.xreadgroup(self.group, self.consumer, {s: ">" for s in self.streams},
                                        count=self.count, block=self.block_ms)
        return _entries(reply)

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

    async def ack(self, entry: Entry) -> None:
        await self.r.xack(entry.stream, self.group, entry.id)


async def dead_letter(r: aioredis.Redis, entry: Entry, reason: str, group: str | None = None) -> None:
    """Park an undecodable or poison entry in ``ts:dead`` and ack it so it is never re-read."""
    log.warning("dead-letter %s %s: %s", entry.stream, entry.id, reason)
    fields = {b"stream": entry.stream, b"id": entry.id, b"reason": reason[:2000], FIELD: entry.data,
              b"t": repr(time.time())}
    await r.xadd(keys.DEAD, fields, maxlen=JOB_STREAM_MAXLEN, approximate=True)
    if group:
        await r.xack(entry.stream, group, entry.id)


async def last_id(r: aioredis.Redis, stream: str) -> str:
    """Id of the newest entry of a stream, or ``0-0``."""
    rows = await r.xrevrange(stream, count=1)
    return _s(rows[0][0]) if rows else "0-0"


async def read_many(r: aioredis.Redis, streams: Mapping[str, str], count: int = 256,
                    block_ms: int | None = None) -> list[Entry]:
    """Entries of many streams, each after its own id, in ONE plain XREAD (no group); waits up to
    ``block_ms`` for the first when given.  Every multi-stream read goes through here."""
    if not streams:
        return []
    reply = await r.xread(dict(streams), count=count, block=block_ms)
    if reply and isinstance(reply[0][1][0][1], dict):  # a client that parses XREAD replies itself
        return _entries(reply)
    out = []
    for stream, rows in reply or ():
        name = stream.decode()
        for entry_id, fields in rows:  # fields: [name, value, ...]; ours carry one, ``d``
            data = fields[1] if fields[0] == FIELD else dict(zip(fields[::2], fields[1::2])).get(FIELD, b"")
            out.append(Entry(name, entry_id.decode(), data))
    return out


async def tail(r: aioredis.Redis, stream: str, after: str, block_ms: int = 1000, count: int = 256) -> list[Entry]:
    """Entries of one stream after ``after``; waits up to ``block_ms``."""
    return await read_many(r, {stream: after}, count, block_ms)


class WakeableRead:
    """ONE blocking ``read_many`` over a changing set of streams, which ``wake()`` interrupts.

    The wake stream (``wake_key``, this reader's own) is part of every read, from an explicit
    cursor, so a wake sent between two reads is never lost: the next read returns at once and
    the caller re-issues it with its current streams.  At most one wake is in flight: every
    wake sent before a read was built is served by that read.
    """

    def __init__(self, reader: aioredis.Redis, r: aioredis.Redis, wake_key: str, count: int = 512,
                 block_ms: int = 5000) -> None:
        self.reader, self.r, self.wake_key = reader, r, wake_key  # ``reader``: this loop's own client
        self.count, self.block_ms = count, block_ms
        self._cursor = "0-0"
        self._waking = False

    async def read(self, streams: Mapping[str, str]) -> list[Entry]:
        """The entries of ``streams`` (stream -> after id) that arrived; returns early on a wake.
        Build ``streams`` in the same step as this call (no await between): that is the hand-over."""
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
        if self._waking:
            return
        self._waking = True
        pipe = self.r.pipeline(transaction=False)
        pipe.xadd(self.wake_key, {b"w": b"1"}, maxlen=16, approximate=True)
        pipe.expire(self.wake_key, 86_400)
        await pipe.execute()

    async def close(self) -> None:
        await self.r.delete(self.wake_key)


async def expire_session(r: aioredis.Redis, sid: str, turns: int, ttl_s: int) -> None:
    """Give every key of an ended session a TTL."""
    pipe = r.pipeline(transaction=False)
    for key in keys.session_keys(sid, turns):
        pipe.expire(key, ttl_s)
    await pipe.execute()


@dataclass(frozen=True)
class ScriptCall:
    """One run of a registered Lua script, queued by its sha: a pipeline that holds it sends no
    SCRIPT EXISTS first (redis-py does for ``Script`` objects); ``Batcher`` loads it on NOSCRIPT."""

    script: Any  # a redis-py (Async)Script, from ``register_script``
    keys: list[Any]
    args: list[Any]

    def __call__(self, pipe: Any) -> Any:
        return pipe.evalsha(self.script.sha, len(self.keys), *self.keys, *self.args)


class Batcher:
    """Sends the commands that many tasks issue in one pipelined round trip.

    ``await call(build)`` (or ``submit(build)``, a future): ``build(pipe)`` queues exactly one
    command on a pipeline -- a ``ScriptCall`` runs a script -- and its reply is returned (its
    error raised).  Commands issued while a round trip is in flight leave together in the next
    one: under load one write serves many sessions; when idle a command leaves at once, with no
    added delay.  A script the server does not know (restarted, flushed) is loaded and re-run.
    """

    def __init__(self, r: aioredis.Redis) -> None:
        self.r = r
        self._queue: list[tuple[Callable[[Any], Any], asyncio.Future]] = []
        self._task: asyncio.Task | None = None

    def submit(self, build: Callable[[Any], Any]) -> asyncio.Future:
        """Queue ``build`` for the next round trip; the future gets its reply."""
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((build, fut))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        return fut

    async def call(self, build: Callable[[Any], Any]) -> Any:
        return await self.submit(build)

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                replies = await self._round_trip([build for build, _ in batch])
            except Exception as exc:  # a connection-level failure: every caller of the batch gets it
                replies = [exc] * len(batch)
            for (_, fut), reply in zip(batch, replies, strict=True):
                if fut.done():  # its caller was cancelled
                    continue
                if isinstance(reply, Exception):
                    fut.set_exception(reply)
                else:
                    fut.set_result(reply)

    async def _round_trip(self, builds: list[Callable[[Any], Any]], retry: bool = True) -> list[Any]:
        pipe = self.r.pipeline(transaction=False)
        for build in builds:
            queued = build(pipe)
            if inspect.isawaitable(queued):  # redis-py Script objects queue themselves asynchronously
                await queued
        replies = await pipe.execute(raise_on_error=False)
        if len(replies) != len(builds):
            raise RuntimeError(f"batcher: {len(builds)} commands queued but {len(replies)} replies")
        unknown = [i for i, (b, rep) in enumerate(zip(builds, replies)) if isinstance(b, ScriptCall)
                   and isinstance(rep, NoScriptError)]
        if unknown and retry:
            for src in {builds[i].script.script for i in unknown}:  # type: ignore[attr-defined]
                await self.r.script_load(src)
            again = await self._round_trip([builds[i] for i in unknown], retry=False)
            for i, reply in zip(unknown, again, strict=True):
                replies[i] = reply
        return replies
