"""runtime.consumer on a real server: entries of different streams that carry the same id are
different entries (a decoder reads the shared queue and its own stream in one read)."""

from __future__ import annotations

import asyncio

from runtime import bus
from runtime.consumer import Consumer, Done
from runtime.turns import Turns


class Recording:
    def __init__(self, expected: int) -> None:
        self.seen: list[tuple[str, str, bytes]] = []
        self.expected = expected
        self.all_in = asyncio.Event()

    async def handle(self, entry: bus.Entry) -> Done:
        self.seen.append((entry.stream, entry.id, entry.data))
        if len(self.seen) == self.expected:
            self.all_in.set()
        await asyncio.sleep(0.05)  # both in flight together
        return Done.ACK


async def test_the_same_id_in_two_streams_is_two_entries_both_handled_at_once(r) -> None:
    """Two streams' ids collide whenever both take an entry in the same millisecond (a burst of new
    turns on the shared queue while the parser tells the decoder about finished ones): the second
    entry was taken for one already in flight, left pending, and handled only when reclaimed."""
    streams = ["s:shared", "s:own"]
    reader = bus.GroupReader(r, streams, "g", "c", block_ms=100)
    handler = Recording(expected=2)
    consumer = Consumer("test", reader, handler, Turns(r), lease_s=5, reclaim_idle_ms=60_000,
                        delete_acked=lambda stream: stream == "s:own")  # a decoder's private stream
    await reader.setup()
    for stream in streams:
        await r.xadd(stream, {bus.FIELD: stream.encode()}, id="1700000000000-0")
    stop = asyncio.Event()
    run = asyncio.create_task(consumer.run(stop))
    try:
        async with asyncio.timeout(5):  # well before any reclaim (60 s)
            await handler.all_in.wait()
            while any([(await r.xpending(s, "g"))["pending"] for s in streams]):  # both acked
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        await run
    assert sorted(handler.seen) == [("s:own", "1700000000000-0", b"s:own"),
                                    ("s:shared", "1700000000000-0", b"s:shared")]
    assert (await r.xlen("s:own"), await r.xlen("s:shared")) == (0, 1)  # acked and deleted, acked


class AcksItself:
    """Sends the consumer's own ack commands in a pipeline of its own, then says so (``Done.ACKED``)."""

    def __init__(self, r, consumer_of) -> None:
        self.r, self.consumer_of, self.done = r, consumer_of, asyncio.Event()

    async def handle(self, entry: bus.Entry) -> Done:
        pipe = self.r.pipeline(transaction=False)
        pipe.set("acks-itself", "written")  # its last write, the ack behind it
        for build in self.consumer_of().ack_calls(entry):
            build(pipe)
        await pipe.execute()
        self.done.set()
        return Done.ACKED


async def test_a_handler_that_acked_its_entry_itself_is_not_acked_again(r, monkeypatch) -> None:
    reader = bus.GroupReader(r, ["s:own"], "g", "c", block_ms=100)
    consumer: Consumer | None = None
    handler = AcksItself(r, lambda: consumer)
    consumer = Consumer("test", reader, handler, Turns(r), lease_s=5, reclaim_idle_ms=60_000,
                        delete_acked=lambda stream: True)
    acked_again: list[bus.Entry] = []

    async def ack(entry: bus.Entry, delete: bool = False) -> None:
        acked_again.append(entry)

    monkeypatch.setattr(reader, "ack", ack)
    await reader.setup()
    await r.xadd("s:own", {bus.FIELD: b"job"})
    stop = asyncio.Event()
    run = asyncio.create_task(consumer.run(stop))
    try:
        async with asyncio.timeout(5):
            await handler.done.wait()
            while consumer.inflight:
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        await run
    assert acked_again == [] and await r.get("acks-itself") == b"written"
    assert (await r.xpending("s:own", "g"))["pending"] == 0 and await r.xlen("s:own") == 0  # acked and deleted
