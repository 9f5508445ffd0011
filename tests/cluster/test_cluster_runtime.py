"""The shared runtime on a real Valkey Cluster: scripts, group reads over several masters, the
tracked many-stream reader (through a slot move), and the scans that must visit every master."""

from __future__ import annotations

import asyncio
import random
import time

import redis
from redis.asyncio.cluster import RedisCluster

from runtime import bus, cluster
from runtime.barrier import Arrival
from runtime.config import load_config
from runtime.session import Sessions, Status
from runtime.turns import Turns
from schemas import keys
from tests.stack_helpers import of, wait_for
from workers.decode.housekeeping import Housekeeping


def on_each_master(valkey_cluster, make, n: int = 1) -> list[str]:
    """``n`` names ``make(i)`` per master, so that every master serves some."""
    per_port: dict[int, list[str]] = {m.port: [] for m in valkey_cluster.masters()}
    i = 0
    while any(len(v) < n for v in per_port.values()):
        name = make(i)
        owned = per_port[valkey_cluster.master_of(name).port]
        if len(owned) < n:
            owned.append(name)
        i += 1
    return [name for names in per_port.values() for name in names]


async def test_connect_gives_a_cluster_client_and_every_session_step_runs(rc) -> None:
    assert isinstance(rc, RedisCluster)
    turns = Turns(rc, batcher=bus.Batcher(rc))
    sessions, barrier = turns.sessions, turns.barrier
    sids = [f"s{i}" for i in range(12)]  # several slots, on every master
    for sid in sids:
        await sessions.create(sid, [{"role": "user", "content": "hi"}], max_turns=2)
        assert (await sessions.claim_turn(sid, 0, "d1")).attempt == 1
        assert await sessions.publish_once(sid, 0, "pseq:0:1", [(1, b"a"), (2, b"b")], 100) == 2  # batched
        await sessions.end_turn(sid, 0, 1, b"end", 100)
        await sessions.record_message(sid, 0, {"role": "assistant", "content": "a", "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "t", "arguments": "{}"}}]})
        assert await barrier.result(sid, 0, 0, {"index": 0, "id": "c0", "name": "t", "content": "r"}) == \
            Arrival.RECORDED
        assert await barrier.turn_end(sid, 0, 1) == Arrival.COMPLETED
        await turns.complete(sid, 0)  # max_turns 2: continues to turn 1
    for sid in sids:
        assert await rc.xlen(keys.events(sid)) == 2
        assert [m["role"] for m in await sessions.messages(sid)] == ["user", "assistant", "tool"]
    assert await rc.xlen(keys.DECODE_JOBS) == len(sids)


async def test_group_reader_waits_on_streams_of_different_masters(rc, valkey_cluster) -> None:
    a, b = on_each_master(valkey_cluster, lambda i: f"ts:test:q{i}")[:2]
    assert valkey_cluster.master_of(a).port != valkey_cluster.master_of(b).port
    reader = bus.GroupReader(rc, [a, b], "g", "c", block_ms=5000)
    await reader.setup()
    pending = asyncio.create_task(reader.read())
    await bus.add(rc, b, b"from b")
    assert [(e.stream, e.data) for e in await asyncio.wait_for(pending, 4)] == [(b, b"from b")]
    await bus.add(rc, a, b"from a")  # the read of ``a`` has been waiting since the first call
    assert [(e.stream, e.data) for e in await asyncio.wait_for(reader.read(), 4)] == [(a, b"from a")]
    reader.close()


async def _follow(reader, cursors: dict[str, str], got: dict[str, list[str]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        for stream, rows in await reader.read(dict(cursors), 64, 200):
            for raw_id, _ in rows:
                eid = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
                got.setdefault(stream, []).append(eid)
                cursors[stream] = eid


async def _write(rc, streams: list[str], n: int, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(n):
        await bus.add(rc, rng.choice(streams), str(i).encode())
        if i % 10 == 0:
            await asyncio.sleep(0)


async def _caught_up(rc, got: dict[str, list[str]], streams: list[str]) -> None:
    async def behind() -> list[str]:
        return [s for s in streams if got.get(s, []) != [i.decode() for i, _ in await rc.xrange(s)]]

    async with asyncio.timeout(20):
        while await behind():
            await asyncio.sleep(0.05)


async def test_many_reader_reads_every_entry_once_across_masters(rc, valkey_cluster) -> None:
    streams = on_each_master(valkey_cluster, lambda i: keys.events(f"m{i}"), n=6)
    reader, cursors, got, stop = bus.many_reader(rc), {s: "0-0" for s in streams[:9]}, {}, asyncio.Event()
    follower = asyncio.create_task(_follow(reader, cursors, got, stop))
    await _write(rc, streams[:9], 300, seed=1)
    cursors.update({s: "0-0" for s in streams[9:]})  # more sessions watched while it runs
    await _write(rc, streams, 300, seed=2)
    await _caught_up(rc, got, streams)
    stop.set()
    await follower
    await reader.aclose()
    assert sum(len(v) for v in got.values()) == 600


async def test_many_reader_follows_a_slot_moving_to_another_master(rc, valkey_cluster) -> None:
    streams = on_each_master(valkey_cluster, lambda i: keys.events(f"mv{i}"), n=2)
    moving = streams[0]
    reader, cursors, got, stop = bus.many_reader(rc), {s: "0-0" for s in streams}, {}, asyncio.Event()
    follower = asyncio.create_task(_follow(reader, cursors, got, stop))
    await _write(rc, streams, 100, seed=3)
    await _caught_up(rc, got, streams)
    target = next(m for m in valkey_cluster.masters() if m.port != valkey_cluster.master_of(moving).port)
    await asyncio.to_thread(valkey_cluster.move_slot, cluster.slot(moving), target)
    assert valkey_cluster.master_of(moving).port == target.port
    for i in range(50):  # the writer's client follows MOVED; so must the reader
        await bus.add(rc, moving, f"after {i}".encode())
    await _caught_up(rc, got, streams)
    stop.set()
    await follower
    await reader.aclose()
    assert len(got[moving]) == await rc.xlen(moving)


async def test_housekeeping_adopts_dead_decoders_streams_on_every_master(rc, valkey_cluster) -> None:
    dead = on_each_master(valkey_cluster, lambda i: keys.decoder_jobs(f"gone{i}"))
    live = on_each_master(valkey_cluster, lambda i: keys.decoder_heartbeat(f"live{i}"))
    for stream in dead:  # registered as its last beat left it, long ago
        await rc.zadd(keys.DECODERS, {stream.rsplit(":", 1)[1]: time.time() - 3600})
        await bus.add(rc, stream, b"job")
    for heartbeat in live:
        worker = heartbeat.rsplit(":", 1)[1]
        await rc.zadd(keys.DECODERS, {worker: time.time()})
        await rc.set(heartbeat, b"{}", px=60_000)
        await bus.add(rc, keys.decoder_jobs(worker), b"stays")
    await Housekeeping(load_config(), rc, "me", Turns(rc)).adopt_orphans()
    assert await rc.xlen(keys.DECODE_JOBS) == len(dead)
    assert not any([await rc.exists(s) for s in dead])
    assert sorted(w.decode() for w in await rc.zrange(keys.DECODERS, 0, -1)) == sorted(
        h.rsplit(":", 1)[1] for h in live)
    assert all([await rc.xlen(keys.decoder_jobs(h.rsplit(":", 1)[1])) == 1 for h in live])


async def test_session_record_survives_on_its_own_slot(rc) -> None:
    sessions = Sessions(rc)
    await sessions.create("rec", [{"role": "user", "content": "x"}], key="k", max_turns=3)
    info = await sessions.get("rec")
    assert info is not None and info.status is Status.ACTIVE and info.max_turns == 3 and info.key == "k"
    bodies = await wait_for(rc, "rec", lambda b: True, timeout_s=1)
    assert of(bodies, "SessionEnded") == []


async def test_many_reader_recovers_lost_listeners(rc, valkey_cluster) -> None:
    streams = on_each_master(valkey_cluster, lambda i: keys.events(f"ls{i}"), n=2)
    reader, cursors, got, stop = bus.many_reader(rc), {s: "0-0" for s in streams}, {}, asyncio.Event()
    follower = asyncio.create_task(_follow(reader, cursors, got, stop))
    await _write(rc, streams, 60, seed=4)
    await _caught_up(rc, got, streams)
    for node in valkey_cluster.masters():  # every invalidation listener is cut off
        with redis.Redis(port=node.port) as c:
            c.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
    await _write(rc, streams, 60, seed=5)
    await _caught_up(rc, got, streams)
    stop.set()
    await follower
    await reader.aclose()
    assert not reader._closing  # the lost links were closed, not left to the garbage collector
    assert sum(len(v) for v in got.values()) == 120
