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
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterPipeline
from redis.exceptions import ClusterError, NoScriptError, ResponseError, SlotNotCoveredError, TryAgainError

from runtime import cluster
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
REDIS_DOWN: tuple[type[BaseException], ...] = (aioredis.ConnectionError, aioredis.TimeoutError, ClusterError,
                                               TryAgainError, SlotNotCoveredError)


@dataclass(frozen=True)
class Entry:
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


def connect(url: str) -> aioredis.Redis:
    """An asyncio client with raw bytes replies (payloads are msgpack); a ``RedisCluster`` for a
    ``redis+cluster://`` URL (``runtime.cluster``)."""
    if cluster.is_cluster_url(url):
        return cluster.connect(url)  # type: ignore[return-value]
    return aioredis.Redis.from_url(url, decode_responses=False, health_check_interval=30)


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
    """Reads a set of streams as one consumer of one group; blocks instead of polling.

    One blocking XREADGROUP covers the streams one command may name together: all of them on
    one server, those of one slot on a cluster (``runtime.cluster.read_groups``).  With several
    such groups, each has its own read in flight, and ``read`` returns as soon as any of them
    has entries; a read still waiting is kept for the next call, never cancelled (a cancelled
    XREADGROUP could take entries into this consumer's pending list that nobody then handles).
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
        for i, task in list(self._inflight.items()):
            if task in done:
                del self._inflight[i]
                out.extend(task.result())  # raises the read's error: the caller retries
        return out

    async def _read(self, streams: list[str]) -> list[Entry]:
        reply = await self.r.xreadgroup(self.group, self.consumer, {s: ">" for s in streams},
                                        count=self.count, block=self.block_ms)
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


async def tail(r: aioredis.Redis, stream: str, after: str, block_ms: int = 1000, count: int = 256) -> list[Entry]:
    """Entries of one stream after ``after`` (plain XREAD, no group); waits up to ``block_ms``."""
    reply = await r.xread({stream: after}, count=count, block=block_ms)
    return _entries(reply)


class ServerReads:
    """New entries of many streams after their cursors, on one server: one blocking XREAD."""

    connections = 1

    def __init__(self, r: aioredis.Redis) -> None:
        self.r = r

    async def read(self, streams: dict[str, str], count: int, block_ms: int) -> list[tuple[str, list]]:
        reply = await self.r.xread(streams, count=count, block=block_ms)
        return [(_s(stream), rows) for stream, rows in reply or []]

    async def aclose(self) -> None:
        pass


def many_reader(r: aioredis.Redis) -> Any:
    """The reader of many streams' new entries after the caller's cursors (XREAD, no group), for
    one task: ``await reader.read({stream: cursor}, count, block_ms) -> [(stream, [(id, fields)])]``,
    blocking until one of them has entries.  One server: one blocking XREAD (``ServerReads``); a
    cluster: a tracked connection per master (``runtime.tracked_reads.ClusterReads``)."""
    if cluster.is_cluster(r):
        from runtime.tracked_reads import ClusterReads

        return ClusterReads(r)
    return ServerReads(r)


async def expire_session(r: aioredis.Redis, sid: str, turns: int, ttl_s: int) -> None:
    """Give every key of an ended session a TTL."""
    pipe = r.pipeline(transaction=False)
    for key in keys.session_keys(sid, turns):
        pipe.expire(key, ttl_s)
    await pipe.execute()


class Batcher:
    """Sends the commands that many tasks issue in one pipelined round trip.

    ``await call(build)``: ``build(pipe)`` queues exactly one command on a pipeline, and its
    reply is returned (its error raised).  Commands issued while a round trip is in flight
    leave together in the next one: under load one write serves many sessions; when idle a
    command leaves at once, with no added delay.
    """

    def __init__(self, r: aioredis.Redis) -> None:
        self.r = r
        self._queue: list[tuple[Callable[[Any], Any], asyncio.Future]] = []
        self._task: asyncio.Task | None = None

    async def call(self, build: Callable[[Any], Any]) -> Any:
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((build, fut))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        return await fut

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

    async def _round_trip(self, builds: list[Callable[[Any], Any]]) -> list[Any]:
        pipe = self.r.pipeline(transaction=False)
        for build in builds:
            queued = build(pipe)
            if inspect.iscoroutine(queued):  # scripts queue themselves asynchronously (never await a
                await queued  # cluster pipeline itself: that empties it)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except AttributeError as exc:  # redis-py 5: a cluster pipeline whose client re-initialized its
            raise aioredis.ConnectionError(f"cluster topology changed mid-pipeline ({exc})") from exc  # nodes
        if len(replies) != len(builds):
            raise RuntimeError(f"batcher: {len(builds)} commands queued but {len(replies)} replies")
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):  # a cluster node without the script yet (a new master):
                replies[i] = await _alone(builds[i], self.r)  # alone, the script loads itself and runs
        return replies


def queue_script(pipe: Any, script: Any, script_keys: list[str], args: list[Any]) -> Any:
    """Queue ``script`` on ``pipe`` (a pipeline, a cluster pipeline -- where redis-py refuses
    ``evalsha`` -- or a client, which runs it at once)."""
    if isinstance(pipe, ClusterPipeline):
        return pipe.execute_command("EVALSHA", script.sha, len(script_keys), *script_keys, *args)
    return script(keys=script_keys, args=args, client=pipe)


async def _alone(build: Callable[[Any], Any], r: aioredis.Redis) -> Any:
    """``build``'s command sent on its own; its reply, or its error."""
    try:
        return await build(r)
    except Exception as exc:  # handed to the caller as the batch's reply, as pipeline errors are
        return exc
