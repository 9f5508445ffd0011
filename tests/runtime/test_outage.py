"""Riding out an unreachable broker (a cluster failover, a restart): retried writes, a repeated
token chunk skipped by the parser, a consumer entry handled again once redis answers."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from runtime import bus
from runtime.config import load_config
from runtime.consumer import Consumer, Done
from runtime.session import Sessions
from runtime.turns import Turns
from schemas import keys
from schemas.codec import decode_event, encode
from schemas.events import ParseTurn, TokenChunk, TokenEnd
from workers.parser.turn_parse import TurnParse
from workers.parser.worker import ParserWorker


class Flaky:
    """Fails ``n`` times with a connection error, then answers."""

    def __init__(self, n: int) -> None:
        self.n, self.calls = n, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.n:
            raise aioredis.ConnectionError("master down")
        return "ok"


async def test_through_outage_retries_then_gives_up() -> None:
    flaky = Flaky(2)
    assert await bus.through_outage(flaky, for_s=5) == "ok" and flaky.calls == 3
    with pytest.raises(aioredis.ConnectionError):
        await bus.through_outage(Flaky(100), for_s=0.3)


async def test_parser_skips_a_token_chunk_written_twice(r) -> None:
    await Sessions(r).create("dup", [{"role": "user", "content": "hi"}], max_turns=1)
    chunks = [TokenChunk(turn=0, attempt=1, seq=i, text=t, n_tokens=1) for i, t in enumerate(["Hel", "lo ", "you"])]
    log = [chunks[0], chunks[1], chunks[1], chunks[2], TokenEnd(turn=0, attempt=1, seq=3, finish_reason="stop")]
    await bus.publish(r, [(keys.tokens("dup"), encode(x)) for x in log])
    worker = ParserWorker(load_config(), r, dispatcher=None)  # no calls: nothing is dispatched
    turn = TurnParse(worker.ctx, ParseTurn(sid="dup", turn=0, attempt=1))
    assert await turn.start()
    reading = asyncio.create_task(worker.tokens.run())  # the parser's shared token reader
    try:
        async with asyncio.timeout(10):
            await worker.tokens.parse(turn)
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
    bodies = [decode_event(f[bus.FIELD]).body for _, f in await r.xrange(keys.events("dup"))]
    assert "".join(b.text for b in bodies if type(b).__name__ == "ContentDelta") == "Hello you"


class Once:
    """Handles an entry; the first try finds redis down."""

    def __init__(self) -> None:
        self.tries = 0
        self.done = asyncio.Event()

    async def handle(self, entry: bus.Entry) -> Done:
        self.tries += 1
        if self.tries == 1:
            raise aioredis.ConnectionError("failing over")
        self.done.set()
        return Done.ACK


async def test_consumer_handles_an_interrupted_entry_again(r) -> None:
    reader = bus.GroupReader(r, ["s:jobs"], "g", "c", block_ms=100)
    handler = Once()
    consumer = Consumer("test", reader, handler, Turns(r), lease_s=5, reclaim_idle_ms=60_000)
    stop = asyncio.Event()
    run = asyncio.create_task(consumer.run(stop))
    await reader.setup()
    await bus.add(r, "s:jobs", b"job")
    async with asyncio.timeout(10):
        await handler.done.wait()
        while (await r.xpending("s:jobs", "g"))["pending"]:  # acked once handled
            await asyncio.sleep(0.02)
    stop.set()
    await run
    assert handler.tries == 2
