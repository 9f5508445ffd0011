"""The parser's shared token reader on a real server, driven with stand-in turns: one read for every
turn, each from its own cursor and in order; plain steps in one round trip; failures stay the turn's own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime import bus
from schemas.events import TokenEnd, ToolCallReady
from workers.parser.token_reader import TokenReader
from workers.parser.turn_parse import Step


class Turn:
    """Stands in for ``TurnParse``: entry ``b"end"`` ends it, ``b"call"`` makes a step that is not
    plain, ``b"boom"`` breaks its parse; every other entry is one event, "published" to ``out:<stream>``."""

    def __init__(self, stream: str, after: str = "0-0", finish_s: float = 0.0) -> None:
        self.stream, self.after, self.finish_s = stream, after, finish_s
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.taken: list[bytes] = []
        self.finished: list[Step] = []
        self.published = 0

    def take(self, entries: list[bus.Entry]) -> Step:
        step = Step()
        for e in entries:
            self.after = e.id
            self.taken.append(e.data)
            if e.data == b"boom":
                raise ValueError("a parser bug")
            if e.data == b"end":
                step.end = TokenEnd(turn=0, attempt=1, seq=0, finish_reason="stop")
                break
            if e.data == b"call":
                step.calls.append(ToolCallReady(index=0, id="c", name="f", arguments="{}"))
            else:
                step.items.append((len(self.taken), e.data))
        return step

    def unpublished(self, step: Step) -> bool:
        return bool(step.items)

    def append_calls(self, step: Step) -> list[Any]:
        return [lambda pipe, d=d: pipe.rpush(f"out:{self.stream}", d) for _, d in step.items]

    def published_to(self, step: Step) -> None:
        self.published = step.items[-1][0]

    async def finish(self, step: Step) -> bool:
        self.finished.append(step)
        await asyncio.sleep(self.finish_s)
        return step.end is not None


@pytest.fixture
async def reader(r):
    tokens = TokenReader(r, r, bus.Batcher(r), "s:wake", block_ms=2000)
    task = asyncio.create_task(tokens.run())
    yield tokens
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _add(r, stream: str, *datas: bytes) -> None:
    await bus.publish(r, [(stream, d) for d in datas])


async def test_every_turn_is_fed_from_one_read_and_published_in_one_round_trip(r, reader: TokenReader) -> None:
    trips = 0
    original = reader.batcher._round_trip

    async def counted(builds: list, retry: bool = True) -> list:
        nonlocal trips
        trips += 1
        return await original(builds, retry)

    reader.batcher._round_trip = counted  # type: ignore[method-assign]
    a, b = Turn("s:a"), Turn("s:b")
    await _add(r, "s:a", b"a1", b"a2")
    await _add(r, "s:b", b"b1")
    runs = [asyncio.create_task(reader.parse(t)) for t in (a, b)]
    await asyncio.sleep(0.3)
    assert await r.lrange("out:s:a", 0, -1) == [b"a1", b"a2"] and await r.lrange("out:s:b", 0, -1) == [b"b1"]
    assert trips <= 2  # both turns' events left together (a second trip only if b joined after a's read)
    await _add(r, "s:a", b"end")
    await _add(r, "s:b", b"end")
    await asyncio.wait_for(asyncio.gather(*runs), 5)
    assert a.taken == [b"a1", b"a2", b"end"] and b.taken == [b"b1", b"end"]
    assert not reader.active and not reader.busy


async def test_a_turn_in_its_ordered_step_is_not_read_and_resumes_in_order(r, reader: TokenReader) -> None:
    a = Turn("s:a", finish_s=0.3)
    run = asyncio.create_task(reader.parse(a))
    await _add(r, "s:a", b"x1", b"call")
    await asyncio.sleep(0.1)
    assert reader.busy == {"s:a"}
    await _add(r, "s:a", b"x2", b"x3")  # arrive while the call's step is being finished
    await asyncio.sleep(0.1)
    assert a.taken == [b"x1", b"call"]
    await asyncio.sleep(0.4)
    assert a.taken == [b"x1", b"call", b"x2", b"x3"] and not reader.busy  # woken back, from its cursor
    assert await r.lrange("out:s:a", 0, -1) == [b"x2", b"x3"]  # x1 went with the call's step
    assert [len(s.items) for s in a.finished] == [1]
    await _add(r, "s:a", b"end")
    await asyncio.wait_for(run, 5)


async def test_a_broken_turn_fails_alone(r, reader: TokenReader) -> None:
    bad, good = Turn("s:bad"), Turn("s:good")
    runs = [asyncio.create_task(reader.parse(t)) for t in (bad, good)]
    await _add(r, "s:bad", b"boom", b"never")
    await _add(r, "s:good", b"g1", b"end")
    with pytest.raises(ValueError, match="a parser bug"):
        await asyncio.wait_for(runs[0], 5)
    await asyncio.wait_for(runs[1], 5)
    assert good.taken == [b"g1", b"end"] and bad.taken == [b"boom"]


async def test_a_second_turn_of_the_same_log_waits_then_reads_from_its_own_cursor(r, reader: TokenReader) -> None:
    first, second = Turn("s:a"), Turn("s:a", after="0-0")
    run1 = asyncio.create_task(reader.parse(first))
    await _add(r, "s:a", b"t0")
    await asyncio.sleep(0.1)
    run2 = asyncio.create_task(reader.parse(second))
    await asyncio.sleep(0.1)
    assert reader.waiting == {"s:a": [second]} and second.taken == []
    await _add(r, "s:a", b"end")
    await asyncio.wait_for(asyncio.gather(run1, run2), 5)
    assert first.taken == [b"t0", b"end"] and second.taken == [b"t0", b"end"]
    assert not reader.active and not reader.waiting


async def test_a_failed_publish_fails_that_turn(r, reader: TokenReader) -> None:
    await r.set("out:s:a", "not a list")  # its publish answers WRONGTYPE
    a, b = Turn("s:a"), Turn("s:b")
    runs = [asyncio.create_task(reader.parse(t)) for t in (a, b)]
    await _add(r, "s:a", b"a1")
    await _add(r, "s:b", b"b1")
    with pytest.raises(Exception, match="WRONGTYPE"):
        await asyncio.wait_for(runs[0], 5)
    await asyncio.sleep(0.1)
    assert b.published == 1 and await r.lrange("out:s:b", 0, -1) == [b"b1"]
    await _add(r, "s:b", b"end")
    await asyncio.wait_for(runs[1], 5)


async def test_a_failed_turns_ordered_step_does_not_release_its_retry(r, reader: TokenReader) -> None:
    """Redis fails every turn while one's ordered step is still running; the retried job reads the
    same log and is in its own ordered step when the old step ends: the old step must not mark the
    log readable (the retry's later events would be published before its call, and its call then
    dropped by the publish marks)."""
    old = Turn("s:a", finish_s=0.6)
    run_old = asyncio.create_task(reader.parse(old))
    await _add(r, "s:a", b"call")
    await asyncio.sleep(0.1)
    assert reader.busy == {"s:a"}
    reader._fail_all(ConnectionError("redis went away"))  # what the read loop does on an outage
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(run_old, 5)
    retry = Turn("s:a", finish_s=1.0)
    run_retry = asyncio.create_task(reader.parse(retry))
    await asyncio.sleep(0.1)
    assert retry.taken == [b"call"] and reader.busy == {"s:a"}  # the retry in its own ordered step
    await _add(r, "s:a", b"x1")
    await asyncio.sleep(0.7)  # the old step has ended meanwhile; the retry's has not
    assert len(old.finished) == 1 and len(retry.finished) == 1
    assert reader.busy == {"s:a"} and retry.taken == [b"call"]
    assert await r.lrange("out:s:a", 0, -1) == []  # nothing of the retry published before its call's step ends
    await asyncio.sleep(0.5)
    assert retry.taken == [b"call", b"x1"] and await r.lrange("out:s:a", 0, -1) == [b"x1"]
    await _add(r, "s:a", b"end")
    await asyncio.wait_for(run_retry, 5)


async def test_a_turn_that_fails_to_start_leaves_and_the_next_turn_of_its_log_runs(r, reader: TokenReader) -> None:
    """A parse that fails while it registers (here its wake is cancelled) leaves the log: the job's retry,
    or the session's next turn, reads it (it used to wait forever behind the turn that never started)."""
    real_wake = reader._read.wake

    async def cancelled_wake() -> None:
        raise asyncio.CancelledError

    reader._read.wake = cancelled_wake  # type: ignore[method-assign]
    with pytest.raises(asyncio.CancelledError):
        await reader.parse(Turn("s:a"))
    assert "s:a" not in reader.active
    reader._read.wake = real_wake  # type: ignore[method-assign]
    retry = Turn("s:a")
    run = asyncio.create_task(reader.parse(retry))
    await _add(r, "s:a", b"x1", b"end")
    await asyncio.wait_for(run, 5)
    assert retry.taken == [b"x1", b"end"]
