"""Stream helpers on a real server: blocking group reads, ack, reclaim, dead letters."""

from __future__ import annotations

import asyncio

import pytest


from schemas import keys
from schemas.codec import encode
from schemas.events import StartTurn
from runtime import bus


async def test_blocking_read_wakes_on_add(r) -> None:
    reader = bus.GroupReader(r, ["s:test"], "g", "c1", block_ms=5000)
    await reader.setup()
    task = asyncio.create_task(reader.read())
    await asyncio.sleep(0.05)
    await bus.add(r, "s:test", b"hello")
    entries = await asyncio.wait_for(task, 2.0)
    assert [e.data for e in entries] == [b"hello"]


async def test_a_lost_group_is_created_again(r) -> None:
    reader = bus.GroupReader(r, ["s:test"], "g", "c1", block_ms=100)
    await reader.setup()
    await r.delete("s:test")  # as a failover that lost the group (and its stream) would
    await bus.add(r, "s:test", b"after")  # the stream again, without the group
    assert await reader.read() == []  # NOGROUP: the group is created again, from the start
    assert [e.data for e in await reader.read()] == [b"after"]


async def test_unacked_entries_are_reclaimed_by_another_consumer(r) -> None:
    dead = bus.GroupReader(r, ["s:test"], "g", "dead", block_ms=100)
    live = bus.GroupReader(r, ["s:test"], "g", "live", block_ms=100)
    await dead.setup()
    await bus.publish(r, [("s:test", b"a"), ("s:test", b"b")])
    assert len(await dead.read()) == 2  # read, never acked
    assert await live.reclaim(min_idle_ms=60_000) == []
    await asyncio.sleep(0.05)
    got = await live.reclaim(min_idle_ms=10)
    assert [e.data for e in got] == [b"a", b"b"] and all(e.deliveries > 1 for e in got)
    for e in got:
        await live.ack(e)
    assert (await r.xpending("s:test", "g"))["pending"] == 0


async def test_dead_letter_parks_and_acks(r) -> None:
    reader = bus.GroupReader(r, ["s:test"], "g", "c", block_ms=100)
    await reader.setup()
    await bus.add(r, "s:test", b"\xc1garbage")
    [entry] = await reader.read()
    await bus.dead_letter(r, entry, "undecodable", "g")
    assert (await r.xpending("s:test", "g"))["pending"] == 0
    [(_, fields)] = await r.xrange(keys.DEAD)
    assert fields[b"reason"] == b"undecodable" and fields[bus.FIELD] == b"\xc1garbage"


async def test_publish_trims_and_tail_reads_in_order(r) -> None:
    await bus.publish(r, [("s:t", encode(StartTurn(sid=str(i), turn=0))) for i in range(10)], maxlen=100)
    entries = await bus.tail(r, "s:t", "0-0", block_ms=10)
    assert len(entries) == 10 and entries == sorted(entries, key=lambda e: tuple(map(int, e.id.split("-"))))
    assert await bus.last_id(r, "s:t") == entries[-1].id


async def test_batcher_gives_each_caller_its_own_reply_or_error(r) -> None:
    batcher = bus.Batcher(r)
    await r.set("s:string", "x")
    script = r.register_script("return tonumber(ARGV[1]) * 2")
    calls = [batcher.call(lambda p, i=i: p.xadd("s:b", {bus.FIELD: str(i).encode()})) for i in range(50)]
    calls.append(batcher.call(lambda p: p.xadd("s:string", {bus.FIELD: b"wrong type"})))
    calls.append(batcher.call(lambda p: script(args=[21], client=p)))
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(x, bytes) for x in results[:50])
    assert isinstance(results[50], Exception) and "WRONGTYPE" in str(results[50])
    assert results[51] == 42
    assert [e.data for e in await bus.tail(r, "s:b", "0-0", block_ms=10)] == [str(i).encode() for i in range(50)]


async def test_batcher_gives_many_commands_one_future_with_each_reply_or_error_in_order(r) -> None:
    batcher = bus.Batcher(r)
    await r.set("s:string", "x")
    single = batcher.submit(lambda p: p.incr("s:n"))
    many = batcher.submit_many([lambda p, i=i: p.execute_command(*bus.xadd("s:m", str(i).encode(), 100))
                                for i in range(5)] + [lambda p: p.incr("s:string"), lambda p: p.incr("s:n")])
    replies = await many
    assert await single == 1 and replies[-1] == 2  # in the same round trip, in the order queued
    assert all(isinstance(x, bytes) for x in replies[:5]) and isinstance(replies[5], Exception)
    assert [e.data for e in await bus.tail(r, "s:m", "0-0", block_ms=10)] == [str(i).encode() for i in range(5)]
    down = bus.Batcher(bus.connect("redis://127.0.0.1:1"))  # nothing listens there
    replies = await down.submit_many([lambda p: p.incr("s:n")] * 3)
    assert len(replies) == 3 and all(isinstance(x, bus.REDIS_DOWN) for x in replies)  # given, not raised
    await down.r.aclose()


async def test_batcher_runs_scripts_by_sha_and_loads_them_when_the_server_forgot(r) -> None:
    batcher = bus.Batcher(r)
    script = r.register_script("return tonumber(ARGV[1]) + #KEYS")
    assert await batcher.call(bus.ScriptCall(script, ["s:k"], [1])) == 2  # never loaded: NOSCRIPT, loaded, re-run
    await r.script_flush()
    futures = [batcher.submit(bus.ScriptCall(script, ["s:a", "s:b"], [i])) for i in range(3)]
    futures.append(batcher.submit(lambda p: p.incr("s:n")))
    assert await asyncio.gather(*futures) == [2, 3, 4, 1]


async def test_read_many_reads_every_stream_after_its_own_id(r) -> None:
    ids = await bus.publish(r, [("s:x", b"x1"), ("s:y", b"y1"), ("s:x", b"x2")])
    got = await bus.read_many(r, {"s:x": ids[0], "s:y": "0-0", "s:none": "0-0"})
    assert sorted((e.stream, e.data) for e in got) == [("s:x", b"x2"), ("s:y", b"y1")]
    assert await bus.read_many(r, {}) == []


async def test_a_wake_interrupts_the_blocked_read_and_is_never_lost(r, redis_url) -> None:
    reader = bus.connect(redis_url)
    shared = bus.WakeableRead(reader, r, "s:wake", block_ms=5000, tracked=False)
    blocked = asyncio.create_task(shared.read({"s:x": "0-0"}))
    await asyncio.sleep(0.05)
    await bus.add(r, "s:y", b"y1")  # not in the blocked read: only a wake makes the caller re-read
    await shared.wake()
    assert await asyncio.wait_for(blocked, 2.0) == []
    assert 0 < await r.ttl("s:wake") <= bus.WAKE_TTL_S  # a dead reader's stream goes away
    await r.persist("s:wake")
    await shared.wake()  # before the next read is built: that read serves it, nothing is sent
    assert await r.xlen("s:wake") == 1
    got = await asyncio.wait_for(shared.read({"s:x": "0-0", "s:y": "0-0"}), 2.0)
    assert [e.data for e in got] == [b"y1"]
    sent_early = asyncio.create_task(shared.wake())  # a wake that lands before the read starts
    await sent_early
    assert await r.ttl("s:wake") == -1  # the TTL is renewed hourly, not with every wake
    assert await asyncio.wait_for(shared.read({"s:x": "0-0"}), 2.0) == []  # returns at once
    await shared.close()
    assert not await r.exists("s:wake")
    await reader.aclose()


async def test_clients_pack_commands_in_c_and_every_value_round_trips(redis_url) -> None:
    from redis.exceptions import DataError

    client = bus.connect(redis_url)
    assert client.connection_pool.connection_class.__name__ == "HiredisConnection"
    values = [b"\x00\xffraw", "héllo ✓", 7, -3, 2**70, 1.5, 0.1]
    for i, v in enumerate(values):
        await client.set(f"s:v{i}", v)
    assert [await client.get(f"s:v{i}") for i in range(len(values))] == [
        b"\x00\xffraw", "héllo ✓".encode(), b"7", b"-3", str(2**70).encode(), b"1.5", b"0.1"]
    assert "maxmemory" in await client.execute_command("CONFIG GET", "maxmemory")  # a two-word command
    with pytest.raises(DataError):
        await client.set("s:bad", None)  # type: ignore[arg-type]
    await client.aclose()


async def test_a_connection_is_handed_out_unchecked_only_when_nothing_can_be_wrong_with_it(redis_url) -> None:
    """The pool skips redis-py's read-with-zero-timeout check for a quiet connection; a connection
    holding an unread reply, or one the server closed, is still verified and replaced.  (The pool
    carries what may block: ``BLPOP`` here; the rest shares one connection, ``runtime.mux``.)"""
    client = bus.connect(redis_url)
    pool = client.connection_pool
    await client.rpush("s:l", *range(40))
    conn = await pool.get_connection()
    await conn.connect()
    assert bus._quiet(conn)
    await conn.send_command("PING")  # a reply left unread (what an interrupted command would leave)
    await pool.release(conn)
    await asyncio.sleep(0.05)  # it has arrived (redis-py's own check, too, sees only what arrived)
    assert not bus._quiet(conn)
    replies = await asyncio.gather(*(client.blpop(["s:l"], timeout=1) for _ in range(8)))
    assert sorted(int(v) for _, v in replies) == list(range(8))  # never the stale PONG
    killer = bus.connect(redis_url)
    for info in await killer.client_list():  # the server closes every connection of the pool
        if int(info["id"]) != await killer.client_id():
            await killer.client_kill_filter(_id=info["id"])
    await asyncio.sleep(0.1)  # the closes reach the client's streams
    assert await client.blpop(["s:l"], timeout=1) == (b"s:l", b"8")  # reconnected, not failed
    replies = await asyncio.gather(*(client.blpop(["s:l"], timeout=1) for _ in range(31)))
    assert sorted(int(v) for _, v in replies) == list(range(9, 40))
    await killer.aclose()
    await client.aclose()


async def test_a_burst_of_commands_waits_for_the_pools_connections_instead_of_opening_more(redis_url) -> None:
    client = bus.connect(redis_url)
    pool = client.connection_pool
    assert pool.max_connections == bus.POOL_CONNECTIONS
    await client.rpush("s:burst", *range(300))
    replies = await asyncio.gather(*(client.blpop(["s:burst"], timeout=1) for _ in range(300)))
    assert sorted(int(v) for _, v in replies) == list(range(300))
    assert len(pool._available_connections) + len(pool._in_use_connections) <= bus.POOL_CONNECTIONS
    # a command that leaves while it waits for a connection takes none with it
    blockers = [asyncio.create_task(client.blpop(["s:never"], timeout=0.3)) for _ in range(bus.POOL_CONNECTIONS)]
    await asyncio.sleep(0.05)  # every connection is held by a blocked read
    waiting = asyncio.create_task(client.blpop(["s:burst"], timeout=0.1))
    await asyncio.sleep(0.05)
    waiting.cancel()
    await asyncio.gather(*blockers, return_exceptions=True)
    await client.rpush("s:burst", "last")
    assert await client.blpop(["s:burst"], timeout=1) == (b"s:burst", b"last")
    assert len(pool._in_use_connections) == 0 and len(pool._available_connections) == bus.POOL_CONNECTIONS
    await client.aclose()


async def test_a_failed_read_of_one_group_keeps_what_another_group_took(r) -> None:
    """On a cluster the streams are read in several groups at once; entries one read took are in
    this consumer's pending list, so an error from another read must not drop them."""
    reader = bus.GroupReader(r, ["s:a", "s:b"], "g", "c", block_ms=100)
    reader._groups = [["s:a"], ["s:b"]]  # as cluster.read_groups gives for streams of two slots
    taken = [bus.Entry("s:a", "1-0", b"job")]

    async def read(streams: list[str]) -> list[bus.Entry]:
        if streams == ["s:a"]:
            return taken
        raise ConnectionError("the master of s:b went away")

    reader._read = read  # type: ignore[method-assign]
    assert await reader.read() == taken
    reader._read = lambda streams: read(["s:b"])  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):  # with nothing taken, the error is the caller's to retry
        await reader.read()


async def test_a_wake_that_cannot_be_sent_does_not_fail_its_caller_and_is_sent_next_time(r, redis_url) -> None:
    """With the server away the blocked read fails too and is re-issued with the current streams: a
    wake that cannot be sent is not its caller's failure (a parse job or a subscription starting)."""
    from turnstream.embedded import EmbeddedRedis

    down = EmbeddedRedis().start()
    unreachable = bus.connect(down.url)
    down.stop()
    shared = bus.WakeableRead(unreachable, unreachable, "s:wake", block_ms=100, tracked=False)
    await shared.wake()  # does not raise
    shared.batcher = bus.Batcher(r)  # the server is back (here: another one)
    await shared.wake()  # sent: the failed one did not leave it marked in flight
    assert await r.xlen("s:wake") == 1
    await unreachable.aclose()
    down.cleanup()


async def test_a_wake_not_waited_for_that_cannot_be_sent_is_sent_next_time(r, redis_url) -> None:
    """The same for ``wake_nowait``: the wake leaves with the caller's next command, and a failure to send
    it is noticed when that round trip fails."""
    from turnstream.embedded import EmbeddedRedis

    down = EmbeddedRedis().start()
    unreachable = bus.connect(down.url)
    down.stop()
    shared = bus.WakeableRead(unreachable, unreachable, "s:wake", block_ms=100, tracked=False)

    async def wake(down: bool) -> None:
        shared.wake_nowait()
        ping = shared.batcher.call(lambda p: p.ping())  # the caller's own command, in the same round trip
        if down:
            with pytest.raises(bus.REDIS_DOWN):
                await ping
        else:
            await ping
        await asyncio.sleep(0)  # the wake's done-callbacks run

    await wake(down=True)
    shared.batcher = bus.Batcher(r)  # the server is back (here: another one)
    await wake(down=False)  # sent: the failed one did not leave it marked in flight
    assert await r.xlen("s:wake") == 1
    await unreachable.aclose()
    down.cleanup()
