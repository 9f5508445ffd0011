"""``bench reads``' prototype of pushed entries (``server-pushed``): every entry once, in order, with the
gaps a push cannot fill -- entries from before the subscription, or written without a push -- read back."""

from __future__ import annotations

import asyncio

import pytest

from bench.reads import PUSH, PushedReads
from runtime import bus
from schemas import keys

pytestmark = pytest.mark.asyncio


async def test_pushed_reads_hand_out_every_entry_once_in_order_and_repair_gaps(redis_url: str) -> None:
    r, w = bus.connect(redis_url), bus.connect(redis_url)
    streams = [keys.events(f"pushed-{i}") for i in range(3)]
    for s in streams:
        await bus.add(w, s, b"before")  # written before the subscription: read by the repair
    reader = PushedReads(r)
    await reader.open(streams)
    sha = await w.script_load(PUSH)
    cursors = {s: "0-0" for s in streams}
    seen: dict[str, list[bytes]] = {s: [] for s in streams}

    async def read_until(n: int) -> None:
        while sum(map(len, seen.values())) < n:
            for stream, rows in await reader.read(dict(cursors), 64, 2000):
                seen[stream] += [fields[bus.FIELD] for _, fields in rows]
                last = rows[-1][0]
                cursors[stream] = last.decode() if isinstance(last, bytes) else last

    try:
        await read_until(3)
        for i in range(4):
            await w.execute_command("EVALSHA", sha, 1, streams[0], f"pushed {i}".encode())
        await bus.add(w, streams[0], b"not pushed")  # a writer that does not push: the next push shows the gap
        await w.execute_command("EVALSHA", sha, 1, streams[0], b"pushed 4")
        await w.execute_command("EVALSHA", sha, 1, streams[1], b"pushed 5")
        await asyncio.wait_for(read_until(10), 10)
        assert seen[streams[0]] == [b"before", b"pushed 0", b"pushed 1", b"pushed 2", b"pushed 3", b"not pushed",
                                    b"pushed 4"]
        assert seen[streams[1]] == [b"before", b"pushed 5"] and seen[streams[2]] == [b"before"]
        assert await reader.read(dict(cursors), 64, 50) == []  # nothing twice
    finally:
        await reader.aclose()
        await r.aclose()
        await w.aclose()


async def test_a_gap_longer_than_a_read_is_read_to_its_end(redis_url: str) -> None:
    """More entries before the subscription than a read returns: the stream stays broken until its repair
    reads come back short, with no push to show the gap again."""
    r, w = bus.connect(redis_url), bus.connect(redis_url)
    stream = keys.events("pushed-long")
    for i in range(5):
        await bus.add(w, stream, f"before {i}".encode())
    reader = PushedReads(r)
    await reader.open([stream])
    cursor, seen = "0-0", []
    try:
        for _ in range(4):
            for _, rows in await reader.read({stream: cursor}, 2, 50):
                seen += [fields[bus.FIELD] for _, fields in rows]
                last = rows[-1][0]
                cursor = last.decode() if isinstance(last, bytes) else last
        assert seen == [f"before {i}".encode() for i in range(5)]
    finally:
        await reader.aclose()
        await r.aclose()
        await w.aclose()
