"""gateway.runner: a session whose start fails leaves no watch in the relay; a stream that ends
before its session (the relay dropped it) cancels the session; a oneshot request opens in two
round trips."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from gateway_harness import event_bytes
from standins import CancelRecordingOps, DroppedSubscription

from gateway.auth import Principal
from gateway.metrics import Metrics
from gateway.relay import Relay
from gateway.runner import Run, failure, open_session
from gateway.sse import EventStreamResponse, Last
from gateway.sessions.ops import SessionOps
from runtime import bus
from runtime.config import load_config
from schemas import keys
from schemas.codec import decode_job
from schemas.events import SessionEnded
from tests.round_trips import count_round_trips


class RecordingRelay:
    """Stands in for the relay: records subscriptions (the relay itself is tested on a real server)."""

    def __init__(self) -> None:
        self.subs: list[object] = []

    async def subscribe(self, sid: str, after: Any, stop_turn: int = 0, fresh: bool = False) -> object:
        sub = SimpleNamespace(session=sid)
        self.subs.append(sub)
        return sub

    def unsubscribe(self, sub: object) -> None:
        self.subs.remove(sub)


class Context:
    async def fits(self, messages: Any, tools: Any, max_tokens: int, sent: bool, prefill: str) -> int:
        return max_tokens


class Ops:
    """``settled``: the stream ``settled_route`` answers (None: a lookup is needed, two round trips)."""

    def __init__(self, start_error: BaseException | None, settled: str | None = None) -> None:
        self.start_error, self.settled = start_error, settled
        self.opened: list[str] = []

    async def create(self, who: Any, messages: Any, **kw: Any) -> str:
        return "s1"

    def settled_route(self, route_key: str) -> str | None:
        return self.settled

    async def route(self, route_key: str) -> str:
        return "jobs"

    async def queue(self, sid: str, stream: str, one_turn: bool = False) -> None:
        if self.start_error is not None:
            raise self.start_error

    async def open(self, sid: str, who: Any, messages: Any, stream: str, **kw: Any) -> None:
        if self.start_error is not None:
            raise self.start_error
        self.opened.append(sid)


PLAN = SimpleNamespace(messages=[{"role": "user", "content": "hi"}], tools=[], params={"max_tokens": 8}, meta={})


@pytest.mark.parametrize("settled", [None, "jobs"], ids=["looked-up", "settled"])
async def test_a_start_that_fails_leaves_no_subscription(settled: str | None) -> None:
    relay = RecordingRelay()
    state = SimpleNamespace(context=Context(), ops=Ops(ConnectionError("redis went away"), settled), relay=relay)
    with pytest.raises(ConnectionError):
        await open_session(state, None, PLAN)
    assert relay.subs == []
    state.ops = Ops(None, settled)
    sid, sub = await open_session(state, None, PLAN)
    assert relay.subs == [sub] and sub.session == sid
    assert (sid == "s1" and state.ops.opened == []) if settled is None else state.ops.opened == [sid]


class EndedSubscription:
    """A subscription whose session ended normally: one event, then the end."""

    last_id = "1-1"

    async def frames(self, idle_s: float | None = None) -> AsyncIterator[Any]:
        yield SimpleNamespace(event="the last event")


class Translator:
    """Passes each event through as one item; the first event ends the session."""

    def __init__(self) -> None:
        self.ended = False

    def start(self) -> list[Any]:
        return []

    def feed(self, ev: Any) -> list[Any]:
        self.ended = True
        return [ev]

    def finish(self) -> list[Any]:
        return []


@pytest.mark.parametrize(("sub", "body", "cancelled"), [
    (DroppedSubscription(), [b"relay_dropped"], [("s1", 0)]),  # nobody can read the rest: stop generating
    (EndedSubscription(), [b"the last event"], []),
])
async def test_a_stream_that_ends_before_its_session_cancels_it(sub: Any, body: list[bytes], cancelled: list) -> None:
    ops, relay = CancelRecordingOps(), RecordingRelay()
    relay.subs.append(sub)
    run = Run(SimpleNamespace(ops=ops, relay=relay), sub, "s1", Translator())
    out = [chunk async for chunk in run.stream(lambda item: item.encode(),
                                               lambda exc: (failure(exc).code or "").encode())]
    assert out == body and ops.cancelled == cancelled and relay.subs == []


class StalledSubscription:
    """One event, then nothing: the client reads no more (a slow client), and the relay drops it."""

    last_id = "1-1"

    def __init__(self) -> None:
        self.ended = asyncio.Event()

    def backlog(self) -> bool:
        return False

    async def frames(self, idle_s: float | None = None) -> AsyncIterator[Any]:
        yield SimpleNamespace(event="an event")
        await asyncio.Event().wait()


@pytest.mark.parametrize(("resumable", "cancelled"), [(True, []), (False, [("s1", 0)])])
async def test_a_run_dropped_while_its_client_stalls_goes_on_only_when_its_client_resumes(
        resumable: bool, cancelled: list) -> None:
    """The relay drops a slow subscriber (its ``ended`` set) while the body waits to send to the client:
    the response cancels the body, which never sees ``Dropped``.  A stored response's client resumes
    from the store, so its session goes on; any other stops generating."""
    ops, relay, sub = CancelRecordingOps(), RecordingRelay(), StalledSubscription()
    relay.subs.append(sub)
    body = Run(SimpleNamespace(ops=ops, relay=relay), sub, "s1", Streaming(2), resumable=resumable).stream(
        str.encode, lambda exc: b"failed")
    sending = asyncio.Event()

    async def consume() -> None:
        async for _ in body:
            sending.set()
            await asyncio.Event().wait()  # the send to a client that reads nothing

    task = asyncio.create_task(consume())
    await sending.wait()
    sub.ended.set()  # the relay dropped it ...
    task.cancel()  # ... and the response ends the body it waits on
    await asyncio.gather(task, return_exceptions=True)
    await body.aclose()
    assert ops.cancelled == cancelled and relay.subs == []


class QueuedSubscription:
    """Events that arrive in bursts: ``bursts`` lists how many were queued together (the relay read
    them in one round while the stream was writing)."""

    last_id = "0-0"

    def __init__(self, bursts: list[int]) -> None:
        self.bursts, self.queued = bursts, 0

    def backlog(self) -> bool:
        return self.queued > 0

    async def frames(self, idle_s: float | None = None) -> AsyncIterator[Any]:
        n = 0
        for burst in self.bursts:
            self.queued = burst
            while self.queued:
                self.queued -= 1
                n += 1
                yield SimpleNamespace(event=f"e{n} ")


class Streaming(Translator):
    """A head, each event as one item, a tail; the session ends after the last of ``n`` events."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def start(self) -> list[Any]:
        return ["head "]

    def feed(self, ev: Any) -> list[Any]:
        self.ended = ev == f"e{self.n} "
        return [ev]

    def finish(self) -> list[Any]:
        return ["tail"]


async def test_events_already_queued_go_out_in_one_write_and_a_lone_event_at_once() -> None:
    relay = RecordingRelay()
    sub = QueuedSubscription([1, 3, 1, 2])
    relay.subs.append(sub)
    run = Run(SimpleNamespace(ops=CancelRecordingOps(), relay=relay), sub, "s1", Streaming(7))
    out = [chunk async for chunk in run.stream(str.encode, lambda exc: b"failed", tail=b" [DONE]")]
    assert out == [b"head ", b"e1 ", b"e2 e3 e4 ", b"e5 ", b"e6 e7 tail [DONE]"]  # the head before any event
    assert [isinstance(chunk, Last) for chunk in out] == [False] * 4 + [True]  # the end of the body goes with it


async def test_a_last_send_that_never_went_out_still_ends_the_body() -> None:
    """The relay drops the run (``abort``) while its last bytes wait for a slow client: the body
    still gets its end, as when any other send was cut short."""
    abort = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield Last(b"the end")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        if message.get("body"):  # waits for the client to read, which it never does
            abort.set()
            await asyncio.Event().wait()
        sent.append(message)

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    await EventStreamResponse(body(), abort=abort)({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, send)
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_a_body_whose_last_bytes_are_marked_ends_in_one_send_and_is_closed() -> None:
    closed: list[bool] = []

    async def body() -> AsyncIterator[bytes]:
        try:
            yield b"a"
            yield Last(b"b")
            yield b"never read"
        finally:
            closed.append(True)

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client stays
        return {}

    await EventStreamResponse(body())({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, send)
    bodies = [(m["body"], m["more_body"]) for m in sent if m["type"] == "http.response.body"]
    assert bodies == [(b"a", True), (b"b", False)] and closed == [True]


@pytest.mark.parametrize(("live", "expected"), [
    # several decoders: the session's writes leave with the routing lookup, then the job
    (frozenset({"d1", "d2"}), [["EVALSHA", "HGETALL", "GET"], ["XADD"]]),
    # one: a route could name only it, so no lookup; the session's writes and its job leave together
    (frozenset({"d1"}), [["EVAL", "XADD"]]),
], ids=["two-decoders", "one-decoder"])
async def test_a_oneshot_request_opens_in_as_few_round_trips_as_its_routing_allows(
        redis_url: str, live: frozenset[str], expected: list[list[str]]) -> None:
    """On a real server (the relay's wake ends its tracked read's wait in this process): the session is
    written, its job queued, and its events reach the subscription."""
    r, reader = bus.connect(redis_url), bus.connect(redis_url)
    batcher = bus.Batcher(r)
    trips = count_round_trips(batcher, r)
    cfg = load_config(redis_url=redis_url)
    relay = Relay(r, reader, block_ms=60_000, batcher=batcher)
    await relay.start()
    state = SimpleNamespace(context=Context(), relay=relay,
                            ops=SessionOps(cfg, r, Metrics(), batcher=batcher, live=lambda: live))
    try:
        _, first = await open_session(state, Principal("k1", "k1"), PLAN)  # a server that never saw the
        relay.unsubscribe(first)  # script loads it, and it runs again: one more round trip, the first time
        trips.clear()
        sid, sub = await open_session(state, Principal("k1", "k1"), PLAN)
        # no active-index ZADD for a oneshot session; no wake stream
        assert trips == expected
        info = await state.ops.sessions.get(sid)
        assert info.key == "k1" and info.oneshot and info.max_turns == 1
        jobs = await r.xrange(keys.DECODE_JOBS)
        assert [decode_job(f[bus.FIELD]).sid for _, f in jobs][-1] == sid
        await bus.publish(r, [(keys.events(sid), event_bytes(sid, 0, 1, SessionEnded(reason="stop")))])
        frames = [f async for f in sub.frames()]
        assert [f.kind for f in frames] == ["session.ended"]  # the reader was woken (its wait is 60 s)
    finally:
        await relay.stop()
        await r.aclose()
        await reader.aclose()
