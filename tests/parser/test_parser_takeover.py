"""A parser taking a turn over publishes nothing twice: the per-token events are plain XADDs, so
what went out before is found in the log (``Sessions.parser_start``), not only in the mark."""

from __future__ import annotations

import asyncio

from runtime import bus
from runtime.config import load_config
from runtime.session import FIRST_PAGE, TAKEOVER_PAGE, Field, Sessions, Status
from schemas import keys
from schemas.codec import decode_event, encode
from schemas.events import (ContentDelta, Event, ParseTurn, SessionEnded, TokenChunk, TokenEnd, ToolResult,
                            TurnStarted)
from workers.parser.turn_parse import TurnParse
from workers.parser.worker import ParserWorker


def _ev(turn: int, attempt: int, seq: int, src: str, body) -> tuple[str, bytes]:
    return keys.events("s"), encode(Event(sid="s", turn=turn, attempt=attempt, seq=seq, src=src, body=body))


def _started(turn: int, attempt: int) -> tuple[str, bytes]:
    return _ev(turn, attempt, 1, "decoder", TurnStarted(prompt_tokens=3, cached_tokens=0, worker="d"))


def _delta(turn: int, attempt: int, seq: int) -> tuple[str, bytes]:
    return _ev(turn, attempt, seq, "parser", ContentDelta(text=f"{seq}"))


def _result(turn: int) -> tuple[str, bytes]:
    return _ev(turn, 0, 0, "tools", ToolResult(index=0, id="c", name="f", content="r"))


async def test_what_a_parser_published_is_read_back_from_the_log(r) -> None:
    sessions = Sessions(r)
    await sessions.create("s", [{"role": "user", "content": "hi"}])
    assert await sessions.parser_start("s", 0, 1) == (-1, False)  # an empty log
    await bus.publish(r, [_started(0, 1), _delta(0, 1, 1), _delta(0, 1, 2), _result(0)])
    assert await sessions.parser_start("s", 0, 1) == (2, False)  # past a later writer's event
    assert await sessions.parser_start("s", 1, 1) == (-1, False)  # an earlier turn's events end the look
    await bus.publish(r, [_delta(0, 1, 3), _started(0, 2)])  # a new attempt began: nothing of it yet
    assert await sessions.parser_start("s", 0, 2) == (-1, False)
    await sessions.set_fields("s", **{Field.parser_seq(0, 2): 5})
    assert await sessions.parser_start("s", 0, 2) == (5, False)  # the ordered publishes' mark
    await bus.publish(r, [_delta(0, 2, 6)] + [_result(0)] * (TAKEOVER_PAGE + 10))
    assert await sessions.parser_start("s", 0, 2) == (6, False)  # found a page further back
    await bus.publish(r, [_delta(0, 2, 7)] + [_result(0)] * (FIRST_PAGE + 3))
    assert await sessions.parser_start("s", 0, 2) == (7, False)  # past the first, short page
    info, published, ended = await sessions.parser_open("s", 0, 2)  # with the record, one round trip
    assert info is not None and info.active and (published, ended) == (7, False)
    await sessions.set_fields("s", **{Field.ended(0): 0})
    assert await sessions.parser_start("s", 0, 2) == (7, True)  # and the turn's session.ended is out


async def _parse(worker: ParserWorker, job: ParseTurn, until: int | None = None) -> None:
    """Parse ``job`` with a fresh ``TurnParse``; with ``until``, stop (a parser killed) once the log
    holds that many parser events."""
    turn = TurnParse(worker.ctx, job)
    assert await turn.start()
    reading = asyncio.create_task(worker.tokens.run())
    parsing = asyncio.create_task(worker.tokens.parse(turn))
    try:
        async with asyncio.timeout(10):
            while until is not None and len(await _parser_events(worker.ctx.r)) < until:
                await asyncio.sleep(0.01)
            if until is None:
                await parsing
    finally:
        for task in (parsing, reading):
            task.cancel()
        await asyncio.gather(parsing, reading, return_exceptions=True)


async def _parser_events(r) -> list[Event]:
    return [e for e in (decode_event(f[bus.FIELD]) for _, f in await r.xrange(keys.events("s"))) if e.src == "parser"]


async def test_a_parser_that_takes_a_turn_over_publishes_nothing_twice(r) -> None:
    await Sessions(r).create("s", [{"role": "user", "content": "hi"}], max_turns=1)
    words = [f"w{i} " for i in range(12)]
    await bus.publish(r, [_started(0, 1)])
    await bus.publish(r, [(keys.tokens("s"), encode(TokenChunk(turn=0, attempt=1, seq=i, text=w, n_tokens=1)))
                          for i, w in enumerate(words)])
    job = ParseTurn(sid="s", turn=0, attempt=1)
    first = ParserWorker(load_config(), r, dispatcher=None)
    await _parse(first, job, until=len(words))  # the first parser published every chunk's event, then died
    rows = await r.xrange(keys.events("s"))
    await r.xdel(keys.events("s"), *[i for i, _ in rows[-3:]])  # ... its last three writes never arrived
    await bus.publish(r, [(keys.tokens("s"), encode(TokenEnd(turn=0, attempt=1, seq=len(words), finish_reason="stop")))])
    await _parse(ParserWorker(load_config(), r, dispatcher=None), job)  # the one that took its job over
    events = await _parser_events(r)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # none twice, none missing
    assert "".join(e.body.text for e in events if isinstance(e.body, ContentDelta)) == "".join(words)
    assert type(events[-1].body).__name__ == "TurnEnded"


async def test_a_turn_taken_over_after_its_session_ended_publishes_nothing(r) -> None:
    """A cancel ended the turn while its parser was down: the one taking the job over publishes no
    per-token event after the end (readers would drop them; they are not written at all)."""
    sessions = Sessions(r)
    await sessions.create("s", [{"role": "user", "content": "hi"}], max_turns=1)
    await bus.publish(r, [_started(0, 1)])
    ended = Event(sid="s", turn=0, attempt=0, seq=0, src="session", body=SessionEnded(reason="cancelled"))
    await sessions.end_once("s", 0, encode(ended), Status.CANCELLED, 100)
    [chunk] = await bus.publish(r, [(keys.tokens("s"), encode(TokenChunk(turn=0, attempt=1, seq=0, text="late ",
                                                                          n_tokens=1)))])
    worker = ParserWorker(load_config(), r, dispatcher=None)

    async def end_later() -> None:  # once the chunk was taken alone: a plain step
        while not any(t.after == chunk for t in worker.tokens.active.values()):
            await asyncio.sleep(0.01)
        await bus.publish(r, [(keys.tokens("s"), encode(TokenEnd(turn=0, attempt=1, seq=1, finish_reason="stop")))])

    ending = asyncio.create_task(end_later())
    await _parse(worker, ParseTurn(sid="s", turn=0, attempt=1))
    await ending
    assert await _parser_events(r) == []
    assert await r.hget(keys.session("s"), Field.message(0)) is not None  # the turn's message is still recorded
