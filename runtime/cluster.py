"""Running on a Valkey/Redis Cluster: the URL, the client, and where keys live.

``redis_url`` names a cluster with the ``redis+cluster://`` scheme (``rediss+cluster://`` for
TLS), listing one or more startup nodes::

    redis+cluster://[user:password@]host1:port1[,host2:port2,...][/]

Every process then uses redis-py's asyncio ``RedisCluster``: single-slot commands, scripts and
pipelines follow MOVED/ASK and failovers themselves.  Two things it cannot do are done here:

* a command over keys of different slots is refused by the server (``CROSSSLOT``) even when
  one node owns them all, so a read of many streams is one read per slot (``by_slot``), or, for
  many sessions' streams, one tracked reader per node (``runtime.tracked_reads``);
* SCAN is per node: the cluster client's ``scan_iter`` asks every master.

On one server (a ``redis://`` URL) the same helpers see one node holding every slot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio as aioredis
from redis._parsers.commands import AsyncCommandsParser
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.cluster import ClusterNode as SyncClusterNode
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.crc import key_slot

SCHEMES = ("redis+cluster", "rediss+cluster")


class ClusterUrlError(ValueError):
    """A ``redis+cluster://`` URL that names no usable node."""


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme in SCHEMES


def parse_url(url: str) -> tuple[list[tuple[str, int]], dict[str, object]]:
    """The startup nodes and connection options of a ``redis+cluster://`` URL."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ClusterUrlError(f"{url!r} is not a {SCHEMES[0]}:// URL")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    nodes = [_host_port(h) for h in hosts.split(",") if h]
    if not nodes:
        raise ClusterUrlError(f"{url!r} names no node; expected {SCHEMES[0]}://host:port[,host:port...]")
    if parts.path.strip("/") not in ("", "0"):
        raise ClusterUrlError(f"{url!r}: a cluster has only database 0")
    opts: dict[str, object] = {"ssl": parts.scheme == "rediss+cluster"}
    if userinfo:
        user, _, password = userinfo.partition(":")
        opts.update(username=unquote(user) or None, password=unquote(password) or None)
    return nodes, opts


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterUrlError(f"cluster node {text!r}: expected host:port")
    return host.strip("[]"), int(port)


class _StreamKeys(AsyncCommandsParser):
    """Finds the keys of XREAD and XREADGROUP itself: redis-py asks a server (``COMMAND GETKEYS``, a
    round trip to one node) for every command whose keys move, and reads are the per-token path."""

    async def get_keys(self, *args: object) -> tuple | None:
        name = _word(args[0])
        if name in ("XREAD", "XREADGROUP"):
            words = [_word(a) for a in args]
            start = words.index("STREAMS", 4 if name == "XREADGROUP" else 1) + 1  # past GROUP g c
            rest = args[start:]
            return tuple(rest[: len(rest) // 2])
        return await super().get_keys(*args)


def _word(arg: object) -> str:
    return (arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)).upper()


def connect(url: str, connection: Callable[[type], type] | None = None) -> RedisCluster:
    """An asyncio cluster client, bytes replies (as ``runtime.bus.connect`` for one server);
    ``connection`` maps redis-py's connection class to the one every node's connections are."""
    nodes, opts = parse_url(url)
    client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes], decode_responses=False,
                          health_check_interval=30, **opts)
    client.commands_parser = _StreamKeys()
    if connection is not None:
        kwargs = client.connection_kwargs  # shared with the nodes manager: the nodes it finds later use it
        kwargs["connection_class"] = connection(kwargs["connection_class"])
        for node in client.nodes_manager.startup_nodes.values():
            node.connection_class = connection(node.connection_class)
    return client


def connect_sync(url: str) -> redis.Redis | SyncRedisCluster:
    """A blocking client for ``url``, a cluster or one server (tools, tests, benchmarks)."""
    if not is_cluster_url(url):
        return redis.Redis.from_url(url)
    nodes, opts = parse_url(url)
    return SyncRedisCluster(startup_nodes=[SyncClusterNode(h, p) for h, p in nodes], **opts)


def is_cluster(r: object) -> bool:
    return isinstance(r, (RedisCluster, SyncRedisCluster))


def slot(key: str | bytes) -> int:
    """The hash slot of ``key`` (its ``{tag}`` when it has one)."""
    return key_slot(key.encode() if isinstance(key, str) else key)


def by_slot(keys: Iterable[str]) -> dict[int, list[str]]:
    """``keys`` grouped by hash slot: the keys one command may name together on a cluster."""
    out: dict[int, list[str]] = {}
    for k in keys:
        out.setdefault(slot(k), []).append(k)
    return out


def read_groups(r: aioredis.Redis, keys: Iterable[str]) -> list[list[str]]:
    """The keys one multi-key read may name together: all of them on one server, per slot on a cluster."""
    keys = list(keys)
    return list(by_slot(keys).values()) if is_cluster(r) else [keys]

