"""The shared-reader relay, in process, on a real server: hand-over without loss or
duplication, wake-up of the shared reader, the slow-client policy."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest
from gateway_harness import event_bytes

from gateway.frames import make_frame, parse_id
from gateway.relay import Dropped, Relay, Subscription
from schemas import keys
from schemas.codec import encode
from schemas.events import ContentDelta, Event, SessionEnded
from runtime import bus


@pytest.fixture
async def relay(redis_url: str, request) -> AsyncIterator[Relay]:
    """A relay with a long wait (only the wake-up makes it prompt, or the 5 s sweep of a tracked read); ``@pytest.mark.queue_size(n)``."""
    mark = request.node.get_closest_marker("queue_size")
    r, reader = bus.connect(redis_url), bus.connect(redis_url)
    rl = Relay(r, reader, queue_size=mark.args[0] if mark else 64, block_ms=60_000)
    await rl.start()
    yield rl
    await rl.stop()
    await r.aclose()
    await reader.aclose()


async def produce(rl: Relay, sid: str, n: int) -> list[str]:
    """Publish ``n`` deltas then session.ended, in small random batches; returns all ids."""
    ids: list[str] = []
    rng = random.Random(7)
    i = 0
    while i < n:
        batch = [(keys.events(sid), event_bytes(sid, 0, j + 1, ContentDelta(text=f"{j} ")))
                 for j in range(i, min(n, i + rng.randint(1, 6)))]
        ids += await bus.publish(rl.r, batch)
        i += len(batch)
        await asyncio.sleep(rng.random() * 0.003)
    ids += await bus.publish(rl.r, [(keys.events(sid), event_bytes(sid, 0, n + 1, SessionEnded(reason="stop")))])
    return ids


async def consume(sub: Subscription, slow: float = 0.0) -> list[str]:
    out = []
    try:
        async for frame in sub.frames():
            out.append(frame.id)
            if slow:
                await asyncio.sleep(slow)
    finally:
        sub.relay.unsubscribe(sub)
    return out


@pytest.mark.queue_size(100_000)
async def test_subscribers_joining_at_any_point_get_each_event_once_in_order(relay: Relay) -> None:
    sid = "handover1"
    producer = asyncio.create_task(produce(relay, sid, 400))
    consumers: list[tuple[str, asyncio.Task]] = []
    rng = random.Random(3)
    for _ in range(12):  # subscribe while the stream grows: from the start, or resuming from some id
        await asyncio.sleep(rng.random() * 0.05)
        rows = await relay.r.xrange(keys.events(sid))
        after = rows[rng.randrange(len(rows))][0].decode() if rows and rng.random() < 0.5 else "0-0"
        sub = await relay.subscribe(sid, parse_id(after))
        consumers.append((after, asyncio.create_task(consume(sub, slow=rng.choice([0, 0.0005])))))
    all_ids = await producer
    for after, task in consumers:
        got = await asyncio.wait_for(task, 30)
        assert got == [i for i in all_ids if parse_id(i) > parse_id(after)], f"subscriber after {after}"
    assert relay.watched == 0 and relay.subscribers == 0


async def test_a_new_subscription_wakes_the_blocked_reader(relay: Relay) -> None:
    idle = await relay.subscribe("idle", (0, 0))  # the reader now blocks (60 s) on "idle" alone
    await asyncio.sleep(0.1)
    sub = await relay.subscribe("fresh", (0, 0))
    ids = await bus.publish(relay.r, [(keys.events("fresh"), event_bytes("fresh", 0, 1, SessionEnded(reason="stop")))])
    assert await asyncio.wait_for(consume(sub), 10) == ids  # well before the 60 s BLOCK would end
    relay.unsubscribe(idle)


async def test_a_slow_subscriber_is_dropped_and_resumes_without_loss(relay: Relay) -> None:
    sid = "slow1"
    stuck = await relay.subscribe(sid, (0, 0))  # never reads while the stream grows
    fast = asyncio.create_task(consume(await relay.subscribe(sid, (0, 0))))
    all_ids = await produce(relay, sid, 200)
    assert await asyncio.wait_for(fast, 10) == all_ids  # others are unaffected
    assert stuck.ended.is_set() and stuck.reason == "slow" and relay.dropped == 1
    assert stuck.queue.qsize() <= relay.queue_size + 1  # bounded: nothing queued after the drop
    received: list[str] = []
    with pytest.raises(Dropped) as exc:
        async for frame in stuck.frames():  # what was queued before the drop, then Dropped
            received.append(frame.id)
    relay.unsubscribe(stuck)
    assert exc.value.reason == "slow" and exc.value.last_id == received[-1]
    resumed = await relay.subscribe(sid, parse_id(exc.value.last_id))
    received += await asyncio.wait_for(consume(resumed), 10)
    assert received == all_ids


async def test_a_consumer_cancelled_as_an_event_arrives_is_cancelled(relay: Relay) -> None:
    """A client that leaves cancels its consumer while it waits with a keep-alive timer; an event
    that arrives in the same step must not swallow that cancel (``asyncio.wait_for`` on 3.11 hands
    the consumer the event instead, and the Messages stream then kept generating to the end)."""
    sub = await relay.subscribe("race", (0, 0))
    got: list[str] = []

    async def read() -> None:
        async for frame in sub.frames(idle_s=30):
            got.append(frame.id)

    task = asyncio.create_task(read())
    try:
        sub.offer(make_frame("1-1", event_bytes("race", 0, 1, ContentDelta(text="a"))))
        while not got:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the consumer waits for the next event again
        sub.offer(make_frame("1-2", event_bytes("race", 0, 2, ContentDelta(text="b"))))
        task.cancel()
        await asyncio.wait({task}, timeout=5)
        assert task.cancelled(), f"the consumer went on after its cancel (read {got})"
        assert got == ["1-1"]
    finally:
        task.cancel()
        relay.unsubscribe(sub)


def _parser_event(sid: str, turn: int, seq: int, body, attempt: int = 1) -> bytes:
    return encode(Event(sid=sid, turn=turn, attempt=attempt, seq=seq, src="parser", body=body))


async def test_a_parser_event_the_log_holds_twice_or_after_its_turn_ended_is_not_relayed(relay: Relay) -> None:
    """The parser's per-token events are plain XADDs: a stalled parser's late writes can repeat one, a
    cancel can land before a chunk's events.  Subscribers drop both; a resumed one too."""
    sid, d = "repeats", ContentDelta
    log = [_parser_event(sid, 0, 1, d(text="a")), _parser_event(sid, 0, 2, d(text="b")),
           _parser_event(sid, 0, 3, d(text="c")),
           _parser_event(sid, 0, 2, d(text="b")),  # a stalled parser of the same attempt wakes up
           _parser_event(sid, 0, 1, d(text="x"), attempt=2),  # a new attempt counts from 1 again
           encode(Event(sid=sid, turn=0, attempt=0, seq=0, src="session", body=SessionEnded(reason="cancelled"))),
           _parser_event(sid, 0, 2, d(text="y"), attempt=2)]  # after the turn's end
    ids = await bus.publish(relay.r, [(keys.events(sid), e) for e in log])
    texts = []
    async with asyncio.timeout(10):
        async for frame in (await relay.subscribe(sid, (0, 0))).frames():
            texts.append(frame.event.body.text if frame.kind == "content.delta" else frame.kind)
    assert texts == ["a", "b", "c", "x", "session.ended"]
    resumed = []  # after "c": the repeat of "b" is met from before the resume point
    async with asyncio.timeout(10):
        async for frame in (await relay.subscribe(sid, parse_id(ids[2]))).frames():
            resumed.append(frame.event.body.text if frame.kind == "content.delta" else frame.kind)
    assert resumed == ["x", "session.ended"]


async def test_a_fresh_session_is_watched_from_its_beginning_without_reading_its_stream(relay: Relay,
                                                                                      monkeypatch) -> None:
    """``fresh``: a session written just now, not started: no round trip for the stream's end, every event
    once; a second subscriber joining the watch meanwhile gets them all too."""
    reads: list[str] = []
    real = bus.last_id

    async def counted(r, stream):
        reads.append(stream)
        return await real(r, stream)

    monkeypatch.setattr(bus, "last_id", counted)
    first = await relay.subscribe("fresh", (0, 0), fresh=True)
    second = await relay.subscribe("fresh", (0, 0), fresh=True)  # joins the watch the first began
    assert reads == []
    got = asyncio.gather(consume(first), consume(second))
    ids = await produce(relay, "fresh", 20)
    assert await asyncio.wait_for(got, 5) == [ids, ids]
    assert relay.watched == 0
