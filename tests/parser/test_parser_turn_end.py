"""A parse stops when its turn ends without a token end: the decode job failed for good, or the
session was cancelled or expired. Before, the parser tailed the token log forever (one leaked task
and one lease per such turn)."""

from __future__ import annotations

import asyncio

import pytest
from runtime import bus
from runtime.config import load_config
from runtime.session import Status
from schemas import keys
from schemas.codec import encode
from schemas.events import ParseTurn, TokenChunk
from workers.parser.turn_parse import TurnParse
from workers.parser.worker import ParserWorker


class NoDispatch:
    """A test double for the tool queue: this test's turn makes no calls."""

    async def dispatch(self, *args: object) -> None:
        raise AssertionError("no call was expected")


@pytest.fixture
async def worker(r) -> ParserWorker:
    w = ParserWorker(load_config(block_ms=50), r, NoDispatch())  # type: ignore[arg-type]
    await w.sessions.create("s", [{"role": "user", "content": "hi"}], max_turns=4)
    await bus.add(r, keys.tokens("s"), encode(TokenChunk(turn=0, attempt=1, seq=0, text="Hel", n_tokens=1)))
    return w


async def _parse_until_stopped(w: ParserWorker, end_it) -> None:
    w.tokens.sweep_s = 0.2
    reader = asyncio.create_task(w.tokens.run())
    try:
        turn = TurnParse(w.ctx, ParseTurn(sid="s", turn=0, attempt=1))
        assert await turn.start()
        task = asyncio.create_task(w.tokens.parse(turn))
        await asyncio.sleep(0.5)
        assert not task.done() and turn.content == ["Hel"]  # the turn is still going: it waits for more tokens
        await end_it()
        await asyncio.wait_for(task, 60)  # it stops by itself (it waited forever before)
        assert not w.tokens.active  # and its token log is no longer read
    finally:
        reader.cancel()


async def test_a_turn_failed_by_the_decoder_stops_its_parse(r, worker) -> None:
    async def fail() -> None:
        await worker.sessions.end_once("s", 0, b"{}", Status.ENDED, bus.EVENT_STREAM_MAXLEN)
    await _parse_until_stopped(worker, fail)


async def test_an_expired_session_stops_its_parse(r, worker) -> None:
    async def expire() -> None:
        await r.delete(keys.session("s"))
    await _parse_until_stopped(worker, expire)
