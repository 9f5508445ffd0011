"""Reads of many streams, woken by the server: a tracked reader connection and a listener.

A blocking XREAD over every stream a process follows names them all each time: the server parses
them, looks each one up, blocks on each and re-runs the whole read when one changes -- per read, work
in the number of streams followed, not in the number that changed (on one server with 300 sessions
followed, ~0.5 ms of the server's CPU a read, 80 % of its command time).  On a cluster it cannot even
be issued: a command may only name keys of one slot (``CROSSSLOT``, even when one node owns them all),
and sessions' streams are spread over the 16384 slots.  So, per server (per master on a cluster)::

    reader    ── CLIENT TRACKING ON REDIRECT <listener> ── XREAD (no BLOCK) of its dirty streams
    listener  ── SUBSCRIBE __redis__:invalidate ────────── "stream S changed" -> S dirty, ``read`` wakes

Every XREAD arms tracking of the streams it names; the next write to one sends one invalidation
(writes until the next read send no more: the server coalesces them).  ``read`` returns the new
entries of the dirty streams after the caller's cursors, or waits up to ``block_ms`` for one to turn
dirty; ``wake()`` ends that wait from this process (``runtime.bus.WakeableRead``: the caller has new
streams to pass in).  Nothing needs configuring on the servers (no keyspace notifications).

* ``ServerTrackedReads``: one server; the dirty streams in ONE XREAD.  A server that refuses
  tracking (an ACL without ``CLIENT``) raises ``TrackingRefused`` (the caller falls back to a
  blocking XREAD); one that cannot be reached raises redis-py's error, as a blocking read would.
* ``ClusterReads``: a cluster; one XREAD per dirty stream, pipelined per master.

Invariants:

* a stream is dirty from the moment it is first passed in until it is read, and its mark is
  cleared *before* its read is sent, so a write while the read is in flight marks it again:
  no wake is lost;
* a read that returns ``count`` entries leaves its stream dirty (there may be more);
* a connection that fails takes its server's tracking with it: every stream of that server is
  dirty again.  One server: the error goes to the caller and the next read reconnects.  A
  cluster: a master that fails (its reader or listener errors: it died, a failover is under way)
  is dropped; its streams are held for ``RETRY_S``, then the slot map is refreshed and they are
  read on whichever master serves them now (the replica that took over);
* on a cluster, a read redirected by MOVED/ASK (the slot moved) is done again through the cluster
  client, which follows the redirection and updates its slot map; the stream stays dirty so that
  its next read arms tracking on its new master;
* every ``sweep_s`` every stream is read once, whatever the wakes (a backstop).

Cursors are the caller's, so dropping a connection never loses a position.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import AskError, NoPermissionError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError

from runtime import cluster

log = logging.getLogger(__name__)

INVALIDATE = b"__redis__:invalidate"
RETRY_S = 0.2
Rows = list[tuple[bytes, dict[bytes, bytes]]]


def _only(reply: Any) -> list[Any]:
    """The entries of a one-stream XREAD reply (raw RESP2), as the server sent them."""
    return reply[0][1] if reply else []


def entry_rows(entries: Any) -> Rows:
    """Entries as the server sent them, each one's fields as a dict."""
    return [(eid, flat if isinstance(flat, dict) else dict(zip(flat[::2], flat[1::2], strict=True)))
            for eid, flat in entries]


def _buffered(conn: Any) -> list[Any]:
    """The replies already read into ``conn``'s hiredis parser, taken without a wait: the invalidations
    of one write round (a decoder's step, ~S/2 XADDs) arrive together and are handled in one pass (one
    ``on_keys``), not a ``read_response`` and an ``on_keys`` each.  Empty for a parser without hiredis's
    buffer."""
    reader = getattr(getattr(conn, "_parser", None), "_reader", None)
    if reader is None:
        return []
    out = []
    while (msg := reader.gets()) is not NOT_ENOUGH_DATA:
        if isinstance(msg, Exception):  # an error reply: raised, as read_response raises it
            raise msg
        out.append(msg)
    return out


class NodeLink:
    """The reader and listener connections to one server or master (see the module doc): ``node``
    has redis-py's ``name``, ``connection_class`` and ``connection_kwargs``."""

    def __init__(self, node: Any, on_keys: Callable[[list[bytes] | None], None],
                 on_lost: Callable[[str], None]) -> None:
        self.node, self.on_keys, self.on_lost = node, on_keys, on_lost
        self.reader = node.connection_class(**node.connection_kwargs)
        # the listener waits for invalidations as long as nothing changes: a URL's socket_timeout is not for it
        self.listener = node.connection_class(**{**node.connection_kwargs, "socket_timeout": None})
        self._task: asyncio.Task | None = None

    async def open(self) -> None:
        await self.listener.connect()
        await self.listener.send_command("CLIENT", "ID")
        listener_id = await self.listener.read_response()
        await self.listener.send_command("SUBSCRIBE", INVALIDATE)
        await self.listener.read_response()
        await self.reader.connect()
        await self.reader.send_command("CLIENT", "TRACKING", "ON", "REDIRECT", listener_id)
        await self.reader.read_response()
        self._task = asyncio.create_task(self._listen(), name=f"tracking-{self.node.name}")

    async def _listen(self) -> None:
        try:
            while True:
                msgs = [await self.listener.read_response(), *_buffered(self.listener)]
                changed: list[bytes] | None = []
                for msg in msgs:
                    if isinstance(msg, list) and len(msg) == 3 and msg[0] == b"message":
                        if msg[2] is None:  # the node was flushed: every key changed
                            changed = None
                        elif changed is not None:
                            changed.extend(msg[2])
                if changed is None or changed:
                    self.on_keys(changed)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the connection's outermost loop: report, the owner reconnects
            log.warning("tracked reads: listener of %s lost (%s)", self.node.name, exc)
            self.on_lost(self.node.name)

    async def read(self, streams: dict[str, str], count: int) -> list[Any]:
        """One round trip: an XREAD per stream after its cursor (a cluster's streams are of many slots);
        each stream's reply, or its error."""
        cmds = [("XREAD", "COUNT", count, "STREAMS", s, c) for s, c in streams.items()]
        await self.reader.send_packed_command(self.reader.pack_commands(cmds))
        out: list[Any] = []
        for _ in cmds:
            try:
                out.append(await self.reader.read_response())
            except ResponseError as exc:  # MOVED, ASK, TRYAGAIN: this stream only
                out.append(exc)
        return out

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for conn in (self.reader, self.listener):
            with contextlib.suppress(Exception):
                await conn.disconnect()


class TrackedReads(abc.ABC):
    """``read(streams, count, block_ms)`` (see the module doc); for one task.  A subclass reads the
    dirty streams (``_read_all``)."""

    link_class: type[NodeLink] = NodeLink

    def __init__(self, sweep_s: float = 5.0) -> None:
        self.sweep_s = sweep_s
        self._links: dict[str, NodeLink] = {}
        self._closing: set[asyncio.Task] = set()  # links being closed after they failed
        self._cursors: dict[str, str] = {}  # each stream's cursor as the caller will pass it if nothing changed
        self._dirty: set[str] = set()
        self._held: set[str] = set()  # streams of a failed master, until ``_retry_at``
        self._retry_at = 0.0
        self._stale = False  # a cluster's slot map must be refreshed before routing
        self._next_sweep = time.monotonic() + sweep_s
        self._woken = asyncio.Event()

    async def read(self, streams: Mapping[str, str], count: int, block_ms: int) -> list[tuple[str, Rows]]:
        """New entries of ``streams`` (name -> cursor) after their cursors; waits up to ``block_ms``."""
        self._track(streams)
        await self._wait(block_ms / 1000)
        self._woken.clear()
        now = time.monotonic()
        if now >= self._next_sweep:
            self._dirty.update(self._cursors)
            self._next_sweep = now + self.sweep_s
        if self._held and now >= self._retry_at:
            self._dirty |= self._held
            self._held.clear()
        todo = {s: streams[s] for s in self._dirty if s in streams}
        self._dirty.clear()
        return await self._read_all(todo, count) if todo else []

    def _track(self, streams: Mapping[str, str]) -> None:
        """Mark the streams passed in anew or from another cursor than their last read left them at (a
        caller that moved a cursor back, as a parser's next turn of the same log does, reads it again)."""
        cursors = self._cursors
        self._dirty.update(stream for stream, cursor in streams.items() if cursors.get(stream) != cursor)
        self._cursors = dict(streams)
        self._held &= streams.keys()

    def _took(self, stream: str, entries: Any, count: int) -> Rows:
        """``stream``'s entries a read returned; its cursor is then the last one's id, and it stays dirty
        when the read returned ``count`` (there may be more)."""
        rows = entry_rows(entries)
        if len(rows) >= count:
            self._dirty.add(stream)
        if rows:
            last = rows[-1][0]
            self._cursors[stream] = last.decode() if isinstance(last, bytes) else last
        return rows

    async def _wait(self, block_s: float) -> None:
        if self._dirty:
            return
        now = time.monotonic()
        block_s = min(block_s, max(0.0, self._next_sweep - now))  # the sweep is never later than ``sweep_s``
        if self._held:
            block_s = min(block_s, max(0.0, self._retry_at - now))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(block_s):
                await self._woken.wait()

    def wake(self) -> None:
        """End the wait of the read in progress (or make the next one return at once): the caller has
        new streams to pass in."""
        self._woken.set()

    def _on_keys(self, changed: list[bytes] | None) -> None:
        if changed is None:
            self._dirty.update(self._cursors)
        else:
            self._dirty.update(stream for stream in map(bytes.decode, changed) if stream in self._cursors)
        if self._dirty:
            self._woken.set()

    def _on_lost(self, name: str) -> None:
        """A listener failed: reconnect, and re-read everything once (that node's streams may have news)."""
        self._drop(name)
        self._dirty.update(self._cursors)
        self._woken.set()

    def _drop(self, name: str) -> None:
        link = self._links.pop(name, None)
        if link is not None:  # closed in the background, kept referenced until done (and awaited by aclose)
            task = asyncio.get_running_loop().create_task(link.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        self._stale = True

    @abc.abstractmethod
    async def _read_all(self, todo: dict[str, str], count: int) -> list[tuple[str, Rows]]:
        """The new entries of the streams in ``todo`` (stream -> cursor), the dirty ones."""

    async def _link(self, node: Any) -> NodeLink:
        link = self._links.get(node.name)
        if link is None:
            link = self.link_class(node, self._on_keys, self._on_lost)
            try:
                await link.open()
            except BaseException:
                await link.close()
                raise
            self._links[node.name] = link
        return link

    def _hold(self, part: dict[str, str], why: str) -> None:
        log.warning("tracked reads: %d streams held for %.1f s: %s", len(part), RETRY_S, why)
        self._held |= part.keys()
        self._retry_at = time.monotonic() + RETRY_S
        self._stale = True

    @property
    def connections(self) -> int:
        """Connections held now: a reader and a listener per server (per master on a cluster)."""
        return 2 * len(self._links)

    async def aclose(self) -> None:
        links, self._links = list(self._links.values()), {}
        await asyncio.gather(*(link.close() for link in links))
        await asyncio.gather(*self._closing, return_exceptions=True)  # links dropped earlier: already lost


class ClusterReads(TrackedReads):
    """Tracked reads over a cluster: a reader and a listener per master (see the module doc)."""

    def __init__(self, r: RedisCluster, sweep_s: float = 5.0) -> None:
        super().__init__(sweep_s)
        self.r = r

    async def _read_all(self, todo: dict[str, str], count: int) -> list[tuple[str, Rows]]:
        parts = await self._route(todo)
        done = await asyncio.gather(*(self._read_node(node, part, count) for node, part in parts))
        return [item for rows in done for item in rows]

    async def _route(self, todo: dict[str, str]) -> list[tuple[ClusterNode, dict[str, str]]]:
        """``todo`` split by the master serving each stream now (the slot map refreshed if stale)."""
        try:
            await self.r.initialize()  # a no-op once the client has its slot map
            if self._stale:
                await self.r.nodes_manager.initialize()
                self._stale = False
            nodes = self.r.nodes_manager
            by_node: dict[str, tuple[ClusterNode, dict[str, str]]] = {}
            for stream, cursor in todo.items():
                node = nodes.get_node_from_slot(cluster.slot(stream))
                by_node.setdefault(node.name, (node, {}))[1][stream] = cursor
            return list(by_node.values())
        except Exception as exc:  # no usable slot map now (a failover): hold everything, retry soon
            self._hold(todo, f"slot map unavailable ({exc})")
            return []

    async def _read_node(self, node: ClusterNode, part: dict[str, str], count: int) -> list[tuple[str, Rows]]:
        try:
            link = await self._link(node)
            replies = await link.read(part, count)
        except Exception as exc:  # the node is unreachable (killed, failing over): hold its streams
            self._drop(node.name)
            self._hold(part, f"{node.name}: {exc}")
            return []
        out: list[tuple[str, Rows]] = []
        for (stream, cursor), reply in zip(part.items(), replies, strict=True):
            if isinstance(reply, (AskError, TryAgainError)):  # MOVED is an AskError too
                log.info("tracked reads: %s redirected (%s); following it", stream, reply)
                reply = await self._redirected(stream, cursor, count)
            if isinstance(reply, Exception):
                self._hold({stream: cursor}, f"{stream}: {reply}")
                continue
            if rows := self._took(stream, _only(reply), count):
                out.append((stream, rows))
        return out

    async def _redirected(self, stream: str, cursor: str, count: int) -> Any:
        """Read a stream whose slot moved through the cluster client (it follows MOVED/ASK)."""
        self._dirty.add(stream)  # read it again on its new master, which arms tracking there
        self._woken.set()
        try:
            return await self.r.execute_command("XREAD", "COUNT", count, "STREAMS", stream, cursor)
        except Exception as exc:
            return exc


class TrackingRefused(Exception):
    """The server refused ``CLIENT TRACKING`` (or the listener's ``SUBSCRIBE``): an ACL forbids it."""


class _Server:
    """A plain client's server, as ``NodeLink`` takes a cluster's node: its pool's connections."""

    def __init__(self, r: Any) -> None:
        pool = r.connection_pool
        self.connection_class, self.connection_kwargs = pool.connection_class, dict(pool.connection_kwargs)
        kw = self.connection_kwargs
        self.name = kw.get("path") or f"{kw.get('host', 'localhost')}:{kw.get('port', 6379)}"


class ServerLink(NodeLink):
    """One server's reader and listener: every dirty stream in ONE XREAD (no slot splits them)."""

    async def read(self, streams: dict[str, str], count: int) -> list[Any]:
        """One XREAD: each stream's entries (none when it has no new ones)."""
        await self.reader.send_command("XREAD", "COUNT", count, "STREAMS", *streams, *streams.values())
        got = {name.decode(): entries for name, entries in await self.reader.read_response() or ()}
        return [got.get(stream, ()) for stream in streams]


class ServerTrackedReads(TrackedReads):
    """Tracked reads on one server (see the module doc): its errors go to the caller."""

    link_class = ServerLink

    def __init__(self, r: Any, sweep_s: float = 5.0) -> None:
        super().__init__(sweep_s)
        self._server = _Server(r)

    async def _read_all(self, todo: dict[str, str], count: int) -> list[tuple[str, Rows]]:
        try:
            replies = await self._read_once(todo, count)
        except BaseException:  # its tracking went with it (or may have): read every stream again
            self._dirty.update(self._cursors)
            raise
        out: list[tuple[str, Rows]] = []
        for stream, entries in zip(todo, replies, strict=True):
            if rows := self._took(stream, entries, count):
                out.append((stream, rows))
        return out

    async def _read_once(self, todo: dict[str, str], count: int) -> list[Any]:
        """The read; one on a link open since an earlier read that fails to reach the server (it closed an
        idle connection, a client was killed) is done again on a new link, once, as redis-py retries a
        stale connection."""
        stale = self._server.name in self._links
        try:
            return await self._read_on_link(todo, count)
        except (RedisConnectionError, OSError):
            if not stale:
                raise
        self._dirty.update(self._cursors)  # the tracking of every stream went with the link: read them all next
        self._woken.set()
        return await self._read_on_link(todo, count)

    async def _read_on_link(self, todo: dict[str, str], count: int) -> list[Any]:
        try:
            link = await self._link(self._server)
        except ResponseError as exc:
            if isinstance(exc, NoPermissionError) or "unknown" in str(exc).lower():
                raise TrackingRefused(f"{self._server.name} refused client tracking: {exc}") from exc
            raise  # a server busy or a listener gone while the link opened: the caller's next read tries again
        try:
            return await link.read(todo, count)
        except BaseException:
            self._drop(self._server.name)
            raise
