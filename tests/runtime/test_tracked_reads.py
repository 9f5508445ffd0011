"""Tracked reads on one server (``runtime.tracked_reads.ServerTrackedReads`` through ``bus.WakeableRead``):
a read names only the streams the server said changed, a wake ends the wait in this process, a lost
listener or server costs nothing, and a server that refuses tracking gets a blocking read instead.
(The same reads on a cluster: ``tests/cluster/test_cluster_runtime.py``.)"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from runtime import bus
from runtime.tracked_reads import ServerTrackedReads, TrackingRefused


async def _xreads(r) -> int:
    stats = await r.info("commandstats")
    return int(stats.get("cmdstat_xread", {}).get("calls", 0))


async def test_a_read_names_only_the_streams_that_changed_and_waits_for_one(r, redis_url) -> None:
    reader = bus.connect(redis_url)
    shared = bus.WakeableRead(reader, r, "s:wake", block_ms=5000)
    streams = {f"s:{i}": "0-0" for i in range(50)}
    assert await asyncio.wait_for(shared.read(streams), 2.0) == []  # the first read arms every stream
    waiting = asyncio.create_task(shared.read(streams))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # nothing changed: it waits (no re-read of 50 streams meanwhile)
    await r.config_resetstat()
    eid = await bus.add(r, "s:7", b"seven")
    got = await asyncio.wait_for(waiting, 2.0)
    assert [(e.stream, e.id, e.data) for e in got] == [("s:7", eid, b"seven")]
    assert await _xreads(r) == 1  # one XREAD, of that stream (the next test says which streams it names)
    assert shared.tracked
    assert not await r.exists("s:wake")  # a tracked reader's wake needs no stream
    await shared.close()
    await reader.aclose()


async def test_the_read_after_a_change_names_that_stream_alone(r, redis_url) -> None:
    reader = bus.connect(redis_url)
    tracked = ServerTrackedReads(reader)
    streams = {f"s:{i}": "0-0" for i in range(50)}
    assert await tracked.read(streams, 16, 1000) == []
    await r.config_set("slowlog-log-slower-than", 0)
    try:
        await r.slowlog_reset()
        await bus.add(r, "s:3", b"x")
        got = await asyncio.wait_for(tracked.read(streams, 16, 1000), 2.0)
        assert [(s, [f[b"d"] for _, f in rows]) for s, rows in got] == [("s:3", [b"x"])]
        reads = [e["command"] for e in await r.slowlog_get(128) if e["command"].startswith(b"XREAD")]
        assert reads == [b"XREAD COUNT 16 STREAMS s:3 0-0"]
    finally:
        await r.config_set("slowlog-log-slower-than", 10000)
    await tracked.aclose()
    await reader.aclose()


async def test_a_wake_ends_the_wait_and_new_streams_are_read_from_their_cursor(r, redis_url) -> None:
    reader = bus.connect(redis_url)
    shared = bus.WakeableRead(reader, r, "s:wake", block_ms=5000)
    await bus.add(r, "s:new", b"before")
    assert await shared.read({"s:old": "0-0"}) == []  # s:old is read (and tracked) from here on
    waiting = asyncio.create_task(shared.read({"s:old": "0-0"}))
    await asyncio.sleep(0.1)
    assert not waiting.done()  # nothing changed: it waits
    shared.wake_nowait()  # the caller has a new stream to pass in
    assert await asyncio.wait_for(waiting, 1.0) == []
    got = await asyncio.wait_for(shared.read({"s:old": "0-0", "s:new": "0-0"}), 1.0)
    assert [e.data for e in got] == [b"before"]  # a stream passed in is read once at once
    await shared.close()
    await reader.aclose()


async def test_a_cursor_moved_back_is_read_again_at_once(r, redis_url) -> None:
    """A parser's next turn of the same token log starts from its own cursor, behind where the last read
    left the log: that log is read again, with no change to wake it."""
    reader = bus.connect(redis_url)
    tracked = ServerTrackedReads(reader)
    first = await bus.add(r, "s:t", b"one")
    await bus.add(r, "s:t", b"two")
    got = await tracked.read({"s:t": "0-0"}, 16, 1000)
    assert [f[b"d"] for _, f in got[0][1]] == [b"one", b"two"]
    again = await asyncio.wait_for(tracked.read({"s:t": first}, 16, 5000), 1.0)
    assert [f[b"d"] for _, f in again[0][1]] == [b"two"]
    await tracked.aclose()
    await reader.aclose()


async def test_the_changes_of_one_write_round_are_heard_in_one_pass(r, redis_url, monkeypatch) -> None:
    """A decoder's step writes many streams in one pipeline, and the server sends their invalidations
    together: the listener takes every one it has read in one pass (one ``on_keys``), not a
    ``read_response`` and an ``on_keys`` each; every change is still heard."""
    reader = bus.connect(redis_url)
    tracked = ServerTrackedReads(reader)
    heard: list[list[bytes] | None] = []
    on_keys = tracked._on_keys
    monkeypatch.setattr(tracked, "_on_keys", lambda changed: (heard.append(changed), on_keys(changed)))
    streams = {f"s:{i}": "0-0" for i in range(50)}
    assert await tracked.read(streams, 16, 1000) == []  # arms every stream (the link takes the recorder)
    async with r.pipeline(transaction=False) as pipe:
        for i in range(50):
            pipe.xadd(f"s:{i}", {"d": b"x"})
        await pipe.execute()
    got: dict[str, int] = {}
    while len(got) < 50:
        for stream, rows in await asyncio.wait_for(tracked.read(streams, 16, 1000), 2.0):
            got[stream] = got.get(stream, 0) + len(rows)
            streams[stream] = rows[-1][0].decode()  # the cursor moves on (a cursor moved back is read again)
    assert got == {s: 1 for s in streams}
    assert sorted(k for keys in heard for k in keys or []) == sorted(s.encode() for s in streams)
    assert len(heard) < 10  # one per socket read, not 50
    await tracked.aclose()
    await reader.aclose()


async def test_a_lost_listener_loses_no_entry(r, redis_url) -> None:
    reader = bus.connect(redis_url)
    shared = bus.WakeableRead(reader, r, "s:wake", block_ms=5000)
    assert await shared.read({"s:a": "0-0", "s:b": "0-0"}) == []
    waiting = asyncio.create_task(shared.read({"s:a": "0-0", "s:b": "0-0"}))
    await asyncio.sleep(0.05)
    await r.execute_command("CLIENT", "KILL", "TYPE", "pubsub")  # the listener
    await bus.add(r, "s:b", b"while nobody listened")
    got = await asyncio.wait_for(waiting, 2.0)
    got += [] if got else await asyncio.wait_for(shared.read({"s:a": "0-0", "s:b": "0-0"}), 2.0)
    assert [e.data for e in got] == [b"while nobody listened"]
    await bus.add(r, "s:a", b"after")  # the new listener hears the next change
    got = await asyncio.wait_for(shared.read({"s:a": "0-0", "s:b": got[0].id}), 2.0)
    assert [e.data for e in got] == [b"after"]
    await shared.close()
    await reader.aclose()


async def test_a_lost_reader_connection_is_replaced_and_every_stream_read_again(r, redis_url) -> None:
    """The server forgets a killed connection's tracking: no change wakes it any more.  The next read
    (here a new stream's) finds the link dead, replaces it and reads every stream again."""
    reader = bus.connect(redis_url)
    tracked = ServerTrackedReads(reader)  # the sweep (5 s) is not what finds it
    assert await tracked.read({"s:a": "0-0"}, 16, 1000) == []
    ids = [c["id"] for c in await r.client_list() if "t" in c["flags"]]  # the tracked reader
    assert len(ids) == 1
    await r.execute_command("CLIENT", "KILL", "ID", ids[0])
    await bus.add(r, "s:a", b"a1")  # no invalidation: its tracking died with it
    streams = {"s:a": "0-0", "s:b": "0-0"}
    got = await asyncio.wait_for(tracked.read(streams, 16, 1000), 1.0)
    got += [] if got else await asyncio.wait_for(tracked.read(streams, 16, 1000), 1.0)
    assert [(s, [f[b"d"] for _, f in rows]) for s, rows in got] == [("s:a", [b"a1"])]
    await tracked.aclose()
    await reader.aclose()


async def test_a_server_gone_fails_the_read_as_a_blocking_read_would_and_one_back_is_read_again() -> None:
    from turnstream.embedded import EmbeddedRedis

    server = EmbeddedRedis().start()
    try:
        reader, writer = bus.connect(server.url), bus.connect(server.url)
        tracked = ServerTrackedReads(reader)
        assert await tracked.read({"s:a": "0-0"}, 16, 1000) == []
        server.stop()
        with pytest.raises(bus.REDIS_DOWN):
            for _ in range(3):  # the listener's loss wakes the read, which reconnects and fails
                await asyncio.wait_for(tracked.read({"s:a": "0-0"}, 16, 1000), 3.0)
        server.start()
        await bus.add(writer, "s:a", b"back")
        got = await asyncio.wait_for(tracked.read({"s:a": "0-0"}, 16, 1000), 3.0)
        assert [(s, [f[b"d"] for _, f in rows]) for s, rows in got] == [("s:a", [b"back"])]
        await tracked.aclose()
        await reader.aclose()
        await writer.aclose()
    finally:
        server.cleanup()


@pytest.mark.parametrize("rules", [("&*", "-client"), ("resetchannels",)], ids=["no-client", "no-channels"])
async def test_a_server_that_refuses_tracking_gets_a_blocking_read(r, redis_url, rules) -> None:
    """An ACL without CLIENT (tracking) or without the invalidation channel (the listener's SUBSCRIBE)."""
    user, password = f"limited-{uuid.uuid4().hex[:8]}", "pw"
    await r.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "+@all", *rules)
    host_port = redis_url.split("//", 1)[1]
    limited = bus.connect(f"redis://{user}:{password}@{host_port}")
    try:
        direct = ServerTrackedReads(limited)
        with pytest.raises(TrackingRefused):
            await direct.read({"s:a": "0-0"}, 16, 100)
        await direct.aclose()

        shared = bus.WakeableRead(limited, limited, "s:wake", block_ms=5000)
        assert await asyncio.wait_for(shared.read({"s:a": "0-0"}), 2.0) == []  # refused: it says so, at once
        assert not shared.tracked
        await bus.add(r, "s:a", b"a1")
        assert [e.data for e in await asyncio.wait_for(shared.read({"s:a": "0-0"}), 2.0)] == [b"a1"]
        waiting = asyncio.create_task(shared.read({"s:a": "9999999999999-0"}))
        await asyncio.sleep(0.05)
        await shared.wake()  # through the wake stream now
        assert await asyncio.wait_for(waiting, 2.0) == []
        assert await r.exists("s:wake")
        await shared.close()
    finally:
        await limited.aclose()
        await r.execute_command("ACL", "DELUSER", user)
