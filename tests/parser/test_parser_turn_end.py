"""A parse stops when its turn ends without a token end: the decode job failed for good, or the
session was cancelled or expired. Before, the parser tailed the token log forever (one leaked task
and one lease per such turn).  A turn that ends its session ends it even when the note to its
decoder fails."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from runtime import bus
from runtime.config import load_config
from runtime.session import SessionMode, Status
from schemas import keys
from schemas.codec import decode_event, decode_job, encode
from schemas.events import ParseTurn, TokenChunk, TokenEnd
from tests.round_trips import count_round_trips
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


async def test_a_turn_that_ends_its_session_finishes_the_end_even_when_the_decoders_note_fails(r, worker,
                                                                                             monkeypatch) -> None:
    """The decoder's note (its KV pin) and the session's end leave side by side; a note that meets a redis
    failure fails the parse job (it is handled again) only after the end completed: the client sees the
    session end once, and the job's retry tells the decoder."""
    await bus.add(r, keys.tokens("s"), encode(TokenEnd(turn=0, attempt=1, seq=1, finish_reason="stop",
                                                       completion_tokens=1, text="Hel")))
    await bus.ensure_group(r, keys.decoder_jobs("d1"), keys.DECODE_GROUP)  # d1 is live: its stream exists
    told: list[str] = []
    real = TurnParse._tell_decoder

    async def unreachable(self: TurnParse) -> None:
        told.append("failed")
        raise aioredis.ConnectionError("redis went away")

    reader = asyncio.create_task(worker.tokens.run())
    try:
        monkeypatch.setattr(TurnParse, "_tell_decoder", unreachable)
        turn = TurnParse(worker.ctx, ParseTurn(sid="s", turn=0, attempt=1, worker="d1"))
        assert await turn.start()
        with pytest.raises(aioredis.ConnectionError):
            await asyncio.wait_for(worker.tokens.parse(turn), 30)
        assert (await worker.sessions.get("s")).status is Status.ENDED  # the end went through beside it
        monkeypatch.setattr(TurnParse, "_tell_decoder", real)
        again = TurnParse(worker.ctx, ParseTurn(sid="s", turn=0, attempt=1, worker="d1"))  # the retry
        if await again.start():
            await asyncio.wait_for(worker.tokens.parse(again), 30)
    finally:
        reader.cancel()
    kinds = [type(decode_event(f[bus.FIELD]).body).__name__ for _, f in await r.xrange(keys.events("s"))]
    assert kinds.count("SessionEnded") == 1 and kinds.count("TurnEnded") == 1, kinds
    assert told == ["failed"] and [decode_job(f[bus.FIELD]).sid for _, f in await r.xrange(keys.decoder_jobs("d1"))]


async def test_a_note_to_a_decoder_whose_stream_is_gone_creates_nothing(r, worker) -> None:
    """A decoder dead past the adoption's grace has no stream; a late note for it must not leave one that
    nobody would ever adopt or delete."""
    await bus.add(r, keys.tokens("s"), encode(TokenEnd(turn=0, attempt=1, seq=1, finish_reason="stop",
                                                       completion_tokens=1, text="Hel")))
    reader = asyncio.create_task(worker.tokens.run())
    try:
        turn = TurnParse(worker.ctx, ParseTurn(sid="s", turn=0, attempt=1, worker="gone"))
        assert await turn.start()
        await asyncio.wait_for(worker.tokens.parse(turn), 30)
    finally:
        reader.cancel()
    assert (await worker.sessions.get("s")).status is Status.ENDED
    assert not await r.exists(keys.decoder_jobs("gone"))


async def test_a_oneshot_turn_ends_its_session_in_two_round_trips(r, worker) -> None:
    """From its token end: the turn's message with its ``turn.ended``, then the session's ending (fold,
    ``session.ended``, status, TTLs: one script) with the note to the decoder."""
    await worker.sessions.create("o", [{"role": "user", "content": "hi"}], mode=SessionMode.ONESHOT)
    await bus.add(r, keys.tokens("o"), encode(TokenChunk(turn=0, attempt=1, seq=0, text="Hello", n_tokens=1)))
    await bus.add(r, keys.tokens("o"), encode(TokenEnd(turn=0, attempt=1, seq=1, finish_reason="stop",
                                                       completion_tokens=1, text="Hello")))
    await bus.ensure_group(r, keys.decoder_jobs("d1"), keys.DECODE_GROUP)
    trips = count_round_trips(worker.ctx.batcher, r)
    reader = asyncio.create_task(worker.tokens.run())
    try:
        turn = TurnParse(worker.ctx, ParseTurn(sid="o", turn=0, attempt=1, worker="d1"))
        assert await turn.start()
        await asyncio.wait_for(worker.tokens.parse(turn), 30)
    finally:
        reader.cancel()
    assert trips[-2:] == [["HSET", "EVALSHA"], ["XADD", "EVALSHA"]], trips
    assert (await worker.sessions.get("o")).status is Status.ENDED
    assert await worker.sessions.messages("o") == [{"role": "user", "content": "hi"},
                                                   {"role": "assistant", "content": "Hello", "raw": "Hello"}]
    assert [decode_job(f[bus.FIELD]).sid for _, f in await r.xrange(keys.decoder_jobs("d1"))] == ["o"]
    assert 0 < await r.ttl(keys.events("o"))
