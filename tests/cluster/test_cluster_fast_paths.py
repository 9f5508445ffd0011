"""The single-server fast paths on a real Valkey Cluster: hiredis packing on every node connection,
``read_many`` over several slots, ``WakeableRead`` through the tracked per-master reader (its wake in
this process, no wake stream), ``ScriptCall``s in a cluster pipeline (loaded on NOSCRIPT), and the
parser's shared token reader parsing turns on every master, a chunk written twice taken once."""

from __future__ import annotations

import asyncio
import time

import pytest

from runtime import bus
from runtime.config import load_config
from runtime.session import Sessions
from schemas import keys
from schemas.codec import decode_event, encode
from schemas.events import ParseTurn, TokenChunk, TokenEnd
from tests.cluster.test_cluster_runtime import on_each_master
from workers.parser.turn_parse import TurnParse
from workers.parser.worker import ParserWorker


async def test_every_node_connection_packs_with_hiredis(rc) -> None:
    names = [keys.session(f"h{i}") for i in range(12)]  # several slots, on every master
    pipe = rc.pipeline(transaction=False)
    for i, name in enumerate(names):
        pipe.hset(name, "v", i)
    await pipe.execute()
    assert [await rc.hget(name, "v") for name in names] == [str(i).encode() for i in range(12)]
    assert {node.connection_class.__name__ for node in rc.get_nodes()} == {"HiredisConnection"}
    assert await rc.script_load("return 1")  # a two-word command sent to every master


async def test_read_many_reads_streams_of_several_slots_without_blocking(rc, valkey_cluster) -> None:
    streams = on_each_master(valkey_cluster, lambda i: keys.events(f"rm{i}"), n=2)
    for i, stream in enumerate(streams):
        await bus.add(rc, stream, str(i).encode())
    got = await bus.read_many(rc, {s: "0-0" for s in streams})
    assert sorted((e.stream, e.data) for e in got) == sorted((s, str(i).encode()) for i, s in enumerate(streams))
    assert [e.data for e in await bus.tail(rc, streams[0], "0-0", block_ms=10)] == [b"0"]  # one slot: one XREAD
    with pytest.raises(ValueError):
        await bus.read_many(rc, {s: "0-0" for s in streams}, block_ms=100)  # cannot block over slots


async def test_wakeable_read_wakes_in_process_and_follows_every_master(rc, valkey_cluster) -> None:
    a, b = on_each_master(valkey_cluster, lambda i: keys.events(f"wk{i}"))[:2]
    assert valkey_cluster.master_of(a).port != valkey_cluster.master_of(b).port
    wake_key = keys.parser_wake("cluster-test")
    shared = bus.WakeableRead(rc, rc, wake_key, block_ms=5000)
    assert await shared.read({a: "0-0"}) == []  # a new stream is read at once (which arms its tracking)
    blocked = asyncio.create_task(shared.read({a: "0-0"}))
    await asyncio.sleep(0.1)
    assert not blocked.done()
    b1 = await bus.add(rc, b, b"b1")  # not in the blocked read: only a wake makes the caller re-read
    await shared.wake()
    assert await asyncio.wait_for(blocked, 2.0) == []
    assert [(e.stream, e.data) for e in await asyncio.wait_for(shared.read({a: "0-0", b: "0-0"}), 2.0)] == \
        [(b, b"b1")]
    await shared.wake()  # while no read waits: the next one returns at once
    t0 = time.monotonic()
    assert await shared.read({a: "0-0", b: b1}) == [] and time.monotonic() - t0 < 1.0
    blocked = asyncio.create_task(shared.read({a: "0-0", b: b1}))
    await asyncio.sleep(0.1)
    await bus.add(rc, a, b"a1")  # a watched stream's write wakes the read (the server's invalidation)
    got = await asyncio.wait_for(blocked, 2.0)
    assert [(e.stream, e.data) for e in got] == [(a, b"a1")] and isinstance(got[0], bus.Entry)
    await shared.close()
    assert not await rc.exists(wake_key)  # a cluster's wake never goes through redis


async def test_script_calls_run_in_a_cluster_pipeline_and_load_on_noscript(rc) -> None:
    script = rc.register_script("return tonumber(ARGV[1]) + #KEYS")  # never loaded: NOSCRIPT on every master
    batcher = bus.Batcher(rc)
    futures = [batcher.submit(bus.ScriptCall(script, [keys.session(f"sc{i}")], [i])) for i in range(12)]
    futures.append(batcher.submit(lambda pipe: pipe.incr(keys.session("sc-n"))))
    assert await asyncio.gather(*futures) == [i + 1 for i in range(12)] + [1]


def _log(sid: str) -> list[bytes]:
    chunks = [TokenChunk(turn=0, attempt=1, seq=i, text=t, n_tokens=1) for i, t in enumerate(["Hel", "lo ", "you"])]
    log = [chunks[0], chunks[1], chunks[1], chunks[2], TokenEnd(turn=0, attempt=1, seq=3, finish_reason="stop")]
    return [encode(x) for x in log]  # chunk 1 written twice: a decoder's write retried through a failover


async def test_the_token_reader_parses_turns_on_every_master(rc, valkey_cluster) -> None:
    streams = on_each_master(valkey_cluster, lambda i: keys.tokens(f"tr{i}"), n=2)
    sids = [keys.sid_of(s) for s in streams]
    for sid in sids:
        await Sessions(rc).create(sid, [{"role": "user", "content": "hi"}], max_turns=1)
    early, late = sids[::2], sids[1::2]
    for sid in early:  # logs written before the parse starts; the others while it waits
        await bus.publish(rc, [(keys.tokens(sid), d) for d in _log(sid)])
    worker = ParserWorker(load_config(), rc, dispatcher=None)  # no calls: nothing is dispatched
    turns = [TurnParse(worker.ctx, ParseTurn(sid=sid, turn=0, attempt=1)) for sid in sids]
    assert all([await t.start() for t in turns])
    reading = asyncio.create_task(worker.tokens.run())
    try:
        parses = asyncio.gather(*(worker.tokens.parse(t) for t in turns))
        await asyncio.sleep(0.3)
        for sid in late:
            for d in _log(sid):
                await bus.add(rc, keys.tokens(sid), d)
        async with asyncio.timeout(15):
            await parses
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
    for sid in sids:
        bodies = [decode_event(f[bus.FIELD]).body for _, f in await rc.xrange(keys.events(sid))]
        assert "".join(b.text for b in bodies if type(b).__name__ == "ContentDelta") == "Hello you", sid
        assert [type(b).__name__ for b in bodies][-2:] == ["TurnEnded", "SessionEnded"], sid
