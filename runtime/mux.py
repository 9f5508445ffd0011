"""One multiplexed connection per process for the commands that return at once.

redis-py sends each command on a connection of its own, taken from a pool and given back: per
command a pool hand-over, a write and a read of its own (two system calls and a loop wake-up
each), however many other tasks send one in the same loop iteration.  Under load a stage's tasks
(a gateway's requests, a decoder's turns) issue their commands together, so here every command
and non-transactional pipeline that cannot block goes on one shared connection instead:

    task A: GET ──┐                       ┌─> A's future
    task B: XADD ─┼─> one write per loop ─┼─> B's future   replies are matched to callers in
    task C: pipe ─┘   iteration           └─> C's future   order (Redis answers in order)

* **Same answers as redis-py.**  ``MuxRedis`` is a redis-py ``Redis`` whose ``execute_command``
  and ``pipeline(transaction=False).execute`` send on the shared connection and run redis-py's
  own response callbacks and error classes on the replies; everything else is redis-py's.
* **What holds a connection stays on the pool**: blocking reads (``BLOCK``, ``BLPOP``...), and
  commands that set a connection's state (transactions, ``WATCH``, ``SELECT``, ``CLIENT``...).
  A blocked command on the shared connection would hold every caller behind it.
* **Failure is redis-py's**: when the connection drops, every command sent on it and not
  answered fails with ``ConnectionError`` (a reply may have been lost: the callers' retries are
  the same as with redis-py, ``bus.through_outage``), and the next command reconnects.  A
  command cancelled while it waits is still answered; its reply is dropped.  When the server reads
  slower than commands come (the socket's buffer past its high mark), new commands wait for it to
  drain, as redis-py's writers do; a URL's ``socket_timeout`` bounds a reply's wait (the link is
  then dropped, as redis-py drops a connection whose read timed out).
* TLS connections, decoded replies and RESP3 stay on redis-py's pool (no shared connection), and
  so does a Redis Cluster's client (``runtime.cluster``: its nodes keep redis-py's connections).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import socket
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis._parsers import BaseParser
from redis.asyncio.client import EMPTY_RESPONSE, NEVER_DECODE, Pipeline
from redis.exceptions import ConnectionError, DataError, InvalidResponse, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0  # when the URL sets no socket_connect_timeout

# Commands that may block, or that change the state of the connection they run on
_POOLED = frozenset({
    "BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP", "WAIT", "WAITAOF",
    "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE", "MONITOR",
    "MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH", "SELECT", "AUTH", "HELLO", "CLIENT", "RESET", "QUIT",
    "READONLY", "READWRITE", "ASKING", "DEBUG", "SYNC", "PSYNC", "SHUTDOWN", "FAILOVER", "REPLICAOF", "SLAVEOF",
})
_READS = frozenset({"XREAD", "XREADGROUP"})  # block only with a BLOCK option (before STREAMS)


_PLAIN, _HOLDS, _READ, _GROUP_READ = 0, 1, 2, 3
_KINDS: dict[Any, int] = {}  # a command's first argument -> its kind (a few dozen names at most)


def _kind(first: Any) -> int:
    word = first.decode() if isinstance(first, bytes) else str(first)
    name = word.split(" ", 1)[0].upper()
    if name in _READS:
        return _GROUP_READ if name == "XREADGROUP" else _READ
    return _HOLDS if name in _POOLED else _PLAIN


def pooled(args: tuple) -> bool:
    """Whether a command must run on a connection of its own (redis-py's pool)."""
    kind = _KINDS.get(args[0])
    if kind is None:
        kind = _kind(args[0])
        if len(_KINDS) < 4096:
            _KINDS[args[0]] = kind
    if kind >= _READ:  # XREADGROUP's options follow GROUP <group> <consumer> (a group may be named STREAMS)
        for arg in args[4 if kind == _GROUP_READ else 1:]:
            word = arg.upper() if isinstance(arg, (str, bytes)) else arg
            if word in ("BLOCK", b"BLOCK"):
                return True
            if word in ("STREAMS", b"STREAMS"):
                return False
        return False
    return kind == _HOLDS


def pack(args: tuple) -> bytes:
    """A command in RESP, packed by hiredis (C); a first argument of several words ("SCRIPT LOAD") is
    sent as separate words, as redis-py does."""
    if isinstance(args[0], str):
        if " " in args[0]:
            args = tuple(args[0].encode().split()) + args[1:]
    elif isinstance(args[0], bytes) and b" " in args[0]:
        args = tuple(args[0].split()) + args[1:]
    try:
        return hiredis.pack_command(args)
    except TypeError as exc:
        raise DataError(str(exc)) from None


class _Link(asyncio.Protocol):
    """The socket: a command leaves at once when nothing is in flight, else with every other
    command sent in the same loop iteration, in one write; replies go to the callers in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.reader = hiredis.Reader(protocolError=InvalidResponse, replyError=BaseParser.parse_error)
        self.transport: asyncio.Transport | None = None
        self.out: list[bytes] = []
        self.waiting: collections.deque[list[Any]] = collections.deque()  # [future, replies expected, replies]
        self.flushing = False
        self.lost: BaseException | None = None
        self.drained: asyncio.Future | None = None  # while the transport's write buffer is over its high mark

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, data: bytes, n: int) -> asyncio.Future:
        """Queue ``n`` packed commands; the future gets the reply (n == 1) or the list of replies."""
        if self.lost is not None:
            raise ConnectionError(f"Connection to the broker lost: {self.lost}")
        fut = self.loop.create_future()
        if not self.waiting and self.transport is not None:  # nothing in flight: no one to wait for
            self.transport.write(data)
        else:  # leaves with what the other tasks send in this loop iteration
            self.out.append(data)
            if not self.flushing:
                self.flushing = True
                self.loop.call_soon(self._flush)
        self.waiting.append([fut, n, [] if n > 1 else None])
        return fut

    def _flush(self) -> None:
        self.flushing = False
        if self.out and self.lost is None and self.transport is not None:
            data, self.out = self.out, []
            self.transport.writelines(data)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        waiting = self.waiting
        while True:
            try:
                reply = self.reader.gets()
            except Exception as exc:  # the stream is not RESP: nothing after it can be matched
                self._fail(exc)
                if self.transport is not None:
                    self.transport.abort()
                return
            if reply is False:
                return
            if not waiting:  # a reply nobody asked for: the stream is out of step
                self._fail(InvalidResponse("a reply with no command waiting for it"))
                if self.transport is not None:
                    self.transport.abort()
                return
            head = waiting[0]
            if head[2] is None:
                waiting.popleft()
                if not head[0].done():
                    head[0].set_result(reply)
                if isinstance(reply, ConnectionError):  # NOAUTH, too many clients: dropped, as redis-py does
                    self.close(reply)
                    return
                continue
            head[2].append(reply)
            if len(head[2]) == head[1]:
                waiting.popleft()
                if not head[0].done():
                    head[0].set_result(head[2])

    def pause_writing(self) -> None:
        """The server reads slower than commands come: new commands wait (``Mux.call``), as redis-py's
        writers wait in ``drain``, instead of growing the buffer without bound."""
        if self.drained is None:
            self.drained = self.loop.create_future()

    def resume_writing(self) -> None:
        drained, self.drained = self.drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("Connection closed by server."))
        self.resume_writing()

    def _fail(self, exc: BaseException) -> None:
        if self.lost is None:
            self.lost = exc
        self.out = []
        error = exc if isinstance(exc, ConnectionError) else ConnectionError(f"Connection to the broker lost: {exc}")
        while self.waiting:
            fut = self.waiting.popleft()[0]
            if not fut.done():
                fut.set_exception(error)

    def close(self, why: BaseException | None = None) -> None:
        self._fail(why or ConnectionError("client closed"))
        if self.transport is not None:
            self.transport.abort()


class Mux:
    """The shared connection of one client: opened on first use, opened again after it drops."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.kwargs = kwargs
        self.timeout: float | None = kwargs.get("socket_timeout")  # a reply's wait, as redis-py's socket_timeout
        self.link: _Link | None = None
        self._opening: asyncio.Task | None = None

    async def call(self, data: bytes, n: int = 1) -> Any:
        link = self.link
        if link is None or link.lost is not None or link.loop is not asyncio.get_running_loop():
            link = await self._open()
        while link.drained is not None:
            await asyncio.shield(link.drained)
            if link.lost is not None:
                link = await self._open()
        if self.timeout is None:
            return await link.send(data, n)
        try:
            return await asyncio.wait_for(link.send(data, n), self.timeout)
        except asyncio.TimeoutError:  # the server is stalled or gone: the link is dropped, as redis-py drops
            link.close(RedisTimeoutError("Timeout reading from the broker"))  # a connection whose read timed out
            raise RedisTimeoutError("Timeout reading from the broker") from None

    async def _open(self) -> _Link:
        loop = asyncio.get_running_loop()
        opening = self._opening
        if opening is None or opening.get_loop() is not loop or (opening.done() and (
                opening.cancelled() or opening.exception() is not None or opening.result().lost is not None)):
            opening = self._opening = loop.create_task(self._connect(loop))
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if opening.cancelled() and task is not None and not task.cancelling():  # the client closed, not the caller
                raise ConnectionError("the client was closed while it connected") from None
            raise

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Link:
        old, self.link = self.link, None
        if old is not None and old.loop is loop:
            old.close()
        kw = self.kwargs
        timeout = kw.get("socket_connect_timeout") or CONNECT_TIMEOUT_S
        try:  # connecting and the handshake together, within the connect timeout
            return await asyncio.wait_for(self._handshake(loop, kw), timeout)
        except asyncio.TimeoutError as exc:
            raise RedisTimeoutError(f"Timeout connecting to the broker ({timeout} s)") from exc

    async def _handshake(self, loop: asyncio.AbstractEventLoop, kw: dict[str, Any]) -> _Link:
        try:
            if kw.get("path"):
                where = kw["path"]
                _, link = await loop.create_unix_connection(lambda: _Link(loop), kw["path"])
            else:
                where = f"{kw.get('host', 'localhost')}:{kw.get('port', 6379)}"
                _, link = await loop.create_connection(lambda: _Link(loop), kw.get("host", "localhost"),
                                                       kw.get("port", 6379))
        except OSError as exc:
            raise ConnectionError(f"Error connecting to {where}: {exc!r}") from exc
        hello = []
        if kw.get("password") is not None:
            user = kw.get("username")
            hello.append(("AUTH", user, kw["password"]) if user else ("AUTH", kw["password"]))
        if kw.get("db"):
            hello.append(("SELECT", kw["db"]))
        if kw.get("client_name"):
            hello.append(("CLIENT", "SETNAME", kw["client_name"]))
        try:
            for cmd in hello:
                reply = await link.send(pack(cmd), 1)
                if isinstance(reply, Exception):
                    raise reply
        except BaseException:  # refused, timed out, cancelled (the client closed meanwhile): no socket left open
            link.close()
            raise
        self.link = link
        return link

    def close(self) -> None:
        """Close the link, and a connect under way (a later command opens a new one, as redis-py's
        clients reconnect after ``aclose``)."""
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
        self._opening = None
        if self.link is not None:
            self.link.close()
            self.link = None


def finish(callbacks: Any, name: Any, reply: Any, options: dict[str, Any]) -> Any:
    """redis-py's handling of one reply (``Redis.parse_response``): its error raised (or the
    command's value for an empty answer), its callback applied."""
    if isinstance(reply, Exception):  # hiredis hands over an error reply as redis-py's exception
        if EMPTY_RESPONSE in options and isinstance(reply, ResponseError):
            return options[EMPTY_RESPONSE]
        raise reply
    if options:
        options.pop(EMPTY_RESPONSE, None)
        options.pop(NEVER_DECODE, None)
        options.pop("keys", None)
    callback = callbacks.get(name)
    return reply if callback is None else callback(reply, **options)


class MuxPipeline(Pipeline):
    """redis-py's pipeline; without a transaction, its commands go on the shared connection."""

    mux: Mux | None = None

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack = self.command_stack
        if self.mux is None or self.is_transaction or self.explicit_transaction or self.watching or self.scripts:
            return await super().execute(raise_on_error)
        if any(pooled(args) for args, _ in stack):
            return await super().execute(raise_on_error)
        if not stack:
            return []
        try:
            packed = [pack(args) for args, _ in stack]
            replies = await self.mux.call(b"".join(packed), len(stack))
            if len(stack) == 1:
                replies = [replies]
            callbacks = self.response_callbacks
            response = []
            for (args, options), reply in zip(stack, replies, strict=True):
                try:
                    value = finish(callbacks, args[0], reply, options)
                    if inspect.iscoroutine(value):
                        value = await value
                except ResponseError as exc:  # in the list, as redis-py's pipelines give it
                    value = exc
                response.append(value)
            if raise_on_error:
                self.raise_first_error(stack, response)
            return response
        finally:
            self.command_stack = []


class MuxRedis(aioredis.Redis):
    """A redis-py client whose commands that return at once share one connection (module doc)."""

    mux: Mux | None = None

    @classmethod
    def from_pool(cls, connection_pool: aioredis.ConnectionPool) -> MuxRedis:  # type: ignore[override]
        client = super().from_pool(connection_pool)
        kwargs = connection_pool.connection_kwargs
        if (not issubclass(connection_pool.connection_class, aioredis.SSLConnection)
                and not kwargs.get("decode_responses") and kwargs.get("protocol") in (None, 2, "2")):
            client.mux = Mux(dict(kwargs))  # bytes replies in RESP2: what hiredis gives and redis-py's callbacks take
        return client  # type: ignore[return-value]

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        mux = self.mux
        if mux is None or pooled(args):
            return await super().execute_command(*args, **options)
        value = finish(self.response_callbacks, args[0], await mux.call(pack(args)), options)
        return await value if inspect.iscoroutine(value) else value

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        pipe = MuxPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        if not transaction and shard_hint is None:
            pipe.mux = self.mux
        return pipe

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        if self.mux is not None:
            self.mux.close()
        await super().aclose(close_connection_pool)
