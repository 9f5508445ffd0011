"""``EmbeddedCluster.restart`` and ``restore``: a killed master restarted follows the replica that
took over (no master is left without a replica), and what a test did to the cluster (masters killed,
one left dead, a slot moved) is undone with the data written meanwhile still readable."""

from __future__ import annotations

import time

import redis

from runtime import cluster
from schemas import keys


def test_a_restarted_node_follows_and_restore_undoes_kills_and_a_slot_move(valkey_cluster, cluster_url) -> None:
    assert valkey_cluster.layout_ok()
    rc = cluster.connect_sync(cluster_url)
    names = [keys.session(f"restore{i}") for i in range(30)]
    for name in names:
        rc.hset(name, "v", name)
    victim = valkey_cluster.master_of(names[0])
    _replicated(valkey_cluster, victim)
    valkey_cluster.kill(victim)  # its replica takes over
    valkey_cluster.wait_healthy()
    valkey_cluster.restart(victim)  # and it follows that replica: every master keeps a replica
    assert victim not in valkey_cluster.masters()
    assert all(len(valkey_cluster.replicas_of(m)) == 1 for m in valkey_cluster.masters())

    second = next(m for m in valkey_cluster.masters() if m.port != valkey_cluster.master_of(names[0]).port)
    _replicated(valkey_cluster, second)
    valkey_cluster.kill(second)  # left dead
    valkey_cluster.wait_healthy()
    other = next(m for m in valkey_cluster.masters() if m.port != valkey_cluster.master_of(names[1]).port)
    valkey_cluster.move_slot(cluster.slot(names[1]), other)
    assert not valkey_cluster.layout_ok()

    valkey_cluster.restore()

    assert valkey_cluster.layout_ok()
    assert victim in valkey_cluster.masters() and second in valkey_cluster.masters()
    assert all(len(valkey_cluster.replicas_of(m)) == 1 for m in valkey_cluster.masters())
    rc.close()
    with redis.RedisCluster.from_url(f"redis://127.0.0.1:{victim.port}") as fresh:
        assert [fresh.hget(name, "v") for name in names] == [name.encode() for name in names]


def _replicated(valkey_cluster, master) -> None:
    """Until ``master``'s replica has every write (a kill then loses nothing)."""
    (replica,) = valkey_cluster.replicas_of(master)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        want = redis.Redis(port=master.port).info("replication")["master_repl_offset"]
        if redis.Redis(port=replica.port).info("replication").get("slave_repl_offset") == want:
            return
        time.sleep(0.05)
    raise AssertionError("the replica did not catch up")
