"""The shared connection (``runtime.mux``): redis-py's answers, one connection, failures as redis-py's."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, ResponseError

from runtime import bus, mux


def _connections(client: aioredis.Redis) -> int:
    pool = client.connection_pool
    return len(pool._available_connections) + len(pool._in_use_connections)


async def test_concurrent_callers_share_one_connection_and_each_gets_its_own_reply(r) -> None:
    await asyncio.gather(*(r.set(f"s:k{i}", f"v{i}") for i in range(200)))
    got = await asyncio.gather(*(r.get(f"s:k{i}") for i in range(200)))
    assert got == [f"v{i}".encode() for i in range(200)]
    assert sorted(await asyncio.gather(*(r.incr("s:n") for _ in range(300)))) == list(range(1, 301))
    assert _connections(r) == 0  # nothing went through redis-py's pool
    clients = await r.client_list()  # this CLIENT command is pooled: the shared link and it
    assert len(clients) == 2


async def test_replies_errors_and_callbacks_are_redis_pys(r, redis_url) -> None:
    """Every kind of reply is what redis-py's own client returns: callbacks, errors, pipelines."""
    plain = aioredis.Redis.from_url(redis_url)
    await r.hset("s:h", mapping={"a": "1", "b": "2"})
    await r.xadd("s:x", {"f": "v"}, id="1-1")
    await r.set("s:str", "text")
    script = "return redis.call('GET', KEYS[1])"
    for n, client in enumerate((r, plain)):
        assert await client.hgetall("s:h") == {b"a": b"1", b"b": b"2"}
        assert await client.xrange("s:x") == [(b"1-1", {b"f": b"v"})]
        assert await client.exists("s:h", "s:none") == 1
        assert await client.set(f"s:nx{n}", "1", nx=True) is True
        assert await client.set(f"s:nx{n}", "1", nx=True) is None
        assert "maxmemory" in await client.execute_command("CONFIG GET", "maxmemory")
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await client.incr("s:h")
        with pytest.raises(NoScriptError):
            await client.evalsha("0" * 40, 0)
        sha = await client.script_load(script)
        assert await client.evalsha(sha, 1, "s:str") == b"text"
        pipe = client.pipeline(transaction=False)
        pipe.get("s:str").incr("s:str").hgetall("s:h").xlen("s:x")
        replies = await pipe.execute(raise_on_error=False)
        assert replies[0] == b"text" and isinstance(replies[1], ResponseError) and replies[2:] == [
            {b"a": b"1", b"b": b"2"}, 1]
        pipe = client.pipeline(transaction=False)
        pipe.get("s:str").incr("s:str")
        with pytest.raises(ResponseError, match=r"Command # 2 \(INCRBY s:str 1\) of pipeline"):
            await pipe.execute()
        assert await client.pipeline(transaction=False).execute() == []
        async with client.pipeline(transaction=True) as tx:  # a transaction: redis-py's own, on the pool
            assert await tx.incr(f"s:t{n}").incr(f"s:t{n}").execute() == [1, 2]
    await plain.aclose()


async def test_a_blocked_read_holds_a_pool_connection_not_the_shared_one(r) -> None:
    blocked = asyncio.create_task(r.blpop(["s:empty"], timeout=5))
    xread = asyncio.create_task(r.xread({"s:nostream": "$"}, block=5000))
    await asyncio.sleep(0.05)
    assert mux.pooled(("XREAD", "BLOCK", 5000, "STREAMS", "s:a", "$"))
    assert not mux.pooled(("XREAD", "COUNT", 5, "STREAMS", "BLOCK", "0-0"))  # a stream named BLOCK
    assert not mux.pooled((b"GET", "k")) and mux.pooled(("CLIENT LIST",))
    done, _ = await asyncio.wait([asyncio.ensure_future(r.get("s:any")), blocked], return_when=asyncio.FIRST_COMPLETED)
    assert not blocked.done()  # the GET was answered while both reads still wait
    assert _connections(r) == 2
    await r.rpush("s:empty", "x")
    assert await blocked == (b"s:empty", b"x")
    await r.xadd("s:nostream", {"f": "v"})
    assert len(await xread) == 1


async def test_a_caller_that_leaves_does_not_shift_the_replies_of_the_others(r) -> None:
    await r.mset({"s:a": "A", "s:b": "B", "s:c": "C"})
    tasks = [asyncio.create_task(r.get(k)) for k in ("s:a", "s:b", "s:c")]
    await asyncio.sleep(0)  # all three queued on the shared connection
    tasks[1].cancel()
    assert await tasks[0] == b"A" and await tasks[2] == b"C"
    assert await r.get("s:b") == b"B"


async def test_a_dropped_connection_fails_what_it_carried_and_the_next_command_reconnects(r, redis_url) -> None:
    from turnstream.embedded import EmbeddedRedis

    await r.set("s:k", "v")
    killer = aioredis.Redis.from_url(redis_url)
    for info in await killer.client_list():  # the server closes every other connection
        if int(info["id"]) != await killer.client_id():
            await killer.client_kill_filter(_id=info["id"])
    await asyncio.sleep(0.1)  # the close reaches the client
    assert await r.get("s:k") == b"v"  # reconnected, not failed
    await killer.aclose()

    down = EmbeddedRedis().start()
    client = bus.connect(down.url)
    await client.set("s:k", "v")
    in_flight = asyncio.ensure_future(client.get("s:k"))
    down.kill()  # before the loop sends it
    with pytest.raises(bus.REDIS_DOWN):
        await asyncio.wait_for(in_flight, 5)
    with pytest.raises(bus.REDIS_DOWN):  # nothing to reconnect to
        await client.get("s:k")
    down.restart()
    assert await client.get("s:k") in (b"v", None)  # back (what the server kept is its own)
    await client.aclose()
    down.cleanup()


def test_a_client_used_from_a_new_event_loop_opens_a_new_connection(redis_url) -> None:
    client = bus.connect(redis_url)
    assert asyncio.run(client.set("s:loop", "1")) is True
    assert asyncio.run(client.get("s:loop")) == b"1"  # the first loop's link is gone with its loop


def test_tls_decoded_replies_and_resp3_stay_on_redis_pys_connections() -> None:
    assert bus.connect("rediss://localhost:6390").mux is None
    for kwargs in ({"decode_responses": True}, {"protocol": 3}):
        assert mux.MuxRedis.from_pool(aioredis.ConnectionPool.from_url("redis://localhost:6390", **kwargs)).mux is None
    assert mux.MuxRedis.from_pool(aioredis.ConnectionPool.from_url("redis://localhost:6390")).mux is not None
    assert bus.connect("redis://localhost:6390/2").mux.kwargs["db"] == 2


async def test_a_database_and_a_password_are_sent_when_the_link_opens(redis_url) -> None:
    admin = aioredis.Redis.from_url(redis_url)
    await admin.acl_setuser("mux-user", enabled=True, passwords=["+secret"], keys=["*"], commands=["+@all"])
    host = redis_url.split("//")[1].split("/")[0]
    client = bus.connect(f"redis://mux-user:secret@{host}/3")
    await client.set("s:db3", "x")
    assert await admin.get("s:db3") is None  # it went to database 3
    assert await client.execute_command("ACL WHOAMI") == "mux-user"  # redis-py's callback decodes it
    wrong = bus.connect(f"redis://mux-user:wrong@{host}/3")
    with pytest.raises(Exception, match="(?i)password|WRONGPASS|invalid"):
        await wrong.get("s:db3")
    await admin.acl_deluser("mux-user")
    await client.aclose()
    await wrong.aclose()
    await admin.aclose()


def test_a_group_or_consumer_named_like_an_option_does_not_hide_a_block() -> None:
    assert mux.pooled(("XREADGROUP", "GROUP", "g", "streams", "BLOCK", 0, "STREAMS", "s", ">"))
    assert mux.pooled(("XREADGROUP", "GROUP", "block", "STREAMS", "BLOCK", 10, "STREAMS", "s", ">"))
    assert not mux.pooled(("XREADGROUP", "GROUP", "BLOCK", "c", "COUNT", 5, "STREAMS", "s", ">"))


async def _stalled_server() -> tuple[asyncio.AbstractServer, int, list]:
    """A server that accepts connections and never answers; ``held`` gets each connection's writer,
    and ``None`` in its place once the client closed it."""
    held: list = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()  # until the client closes
        held[held.index(writer)] = None
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], held


async def test_a_stalled_server_times_out_as_with_redis_py_and_the_link_is_dropped() -> None:
    server, port, held = await _stalled_server()
    client = bus.connect(f"redis://127.0.0.1:{port}?socket_timeout=0.2")
    calls = [asyncio.ensure_future(client.get("s:k")) for _ in range(3)]
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)
    assert all(isinstance(x, bus.REDIS_DOWN) for x in results)  # every caller told, none left waiting
    assert client.mux.link is None or client.mux.link.lost is not None
    # a handshake that gets no answer is bounded by the connect timeout
    client2 = bus.connect(f"redis://:secret@127.0.0.1:{port}?socket_connect_timeout=0.2")
    with pytest.raises(bus.REDIS_DOWN):
        await asyncio.wait_for(client2.get("s:k"), 5)
    await client.aclose()
    await client2.aclose()
    for w in filter(None, held):
        w.close()
    server.close()


async def test_closing_the_client_while_it_connects_leaves_no_link_open() -> None:
    server, port, held = await _stalled_server()
    client = bus.connect(f"redis://:secret@127.0.0.1:{port}")  # the AUTH is never answered
    pending = asyncio.ensure_future(client.get("s:k"))
    await asyncio.sleep(0.1)
    await client.aclose()
    with pytest.raises(bus.REDIS_DOWN):  # the caller is told, not cancelled
        await asyncio.wait_for(pending, 5)
    for _ in range(100):  # the close reaches the server
        if held and not any(held):
            break
        await asyncio.sleep(0.02)
    assert client.mux.link is None and len(held) == 1 and held[0] is None
    server.close()


async def test_a_value_that_cannot_be_sent_fails_the_pipeline_and_leaves_it_empty(r) -> None:
    from redis.exceptions import DataError

    pipe = r.pipeline(transaction=False)
    pipe.set("s:a", "1").set("s:b", None)  # type: ignore[arg-type]
    with pytest.raises(DataError):
        await pipe.execute()
    assert len(pipe) == 0 and await pipe.execute() == []
    assert await r.get("s:a") is None  # nothing of it was sent


async def test_a_full_write_buffer_holds_new_commands_until_it_drains(r) -> None:
    await r.set("s:k", "v")
    link = r.mux.link
    link.pause_writing()  # what the transport calls when its buffer passes its high-water mark
    held = asyncio.ensure_future(r.get("s:k"))
    await asyncio.sleep(0.05)
    assert not held.done() and not link.waiting  # waiting to be written, not written
    link.resume_writing()
    assert await asyncio.wait_for(held, 2) == b"v"
