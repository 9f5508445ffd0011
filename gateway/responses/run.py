"""Relaying one response: its session's events, through the relay, translated by ``ResponseStream``.

Every relay starts from the session's first event and re-translates, so the sequence
numbers are the same for every reader; ``after`` leaves out the events a resuming client
already has (``starting_after``).  Three ways to consume it:

* ``sse()``      -- ``event: <type>`` / ``data: <json>`` pairs until the terminal event; a relay
                   drop ends the stream with an ``error`` event: a stored response goes on and the
                   client resumes with ``starting_after``; one not stored (``store: false``) is
                   cancelled.  With ``cancel_on_leave`` (a non-background request) a client that
                   leaves before the end cancels the session, which stops generation.
* ``collect()``  -- the final Response object (non-streaming request; leaving cancels too).
* ``follow()``   -- consume to the end with nobody listening (``background: true``).

Each finalizes a stored response when it sees the session end (``gateway.responses.read``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from gateway.errors import ApiError
from gateway.relay import Dropped, Subscription
from gateway.responses.format import ResponseStream
from gateway.responses.read import finalize
from gateway.responses.store import StoredResponse
from gateway.sse import sse_typed, while_connected
from runtime.session import Status

log = logging.getLogger(__name__)


class ResponseRun:
    def __init__(self, state: Any, sid: str, stream: ResponseStream, sub: Subscription,
                 stored: StoredResponse | None, after: int = -1) -> None:
        self.state, self.sid, self.stream, self.sub, self.stored, self.after = state, sid, stream, sub, stored, after

    @classmethod
    async def open(cls, state: Any, sid: str, stream: ResponseStream, stored: StoredResponse | None,
                   after: int = -1) -> ResponseRun:
        """Subscribe to the session's events from its first one."""
        sub = await state.relay.subscribe(sid, (0, 0), stop_turn=0)
        return cls(state, sid, stream, sub, stored, after)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """The translated events past ``after``, until the response ends (raises ``Dropped``)."""
        for event in self.stream.start():
            if event["sequence_number"] > self.after:
                yield event
        async for frame in self.sub.frames():
            for event in self.stream.feed(frame.event):
                if event["sequence_number"] > self.after:
                    yield event
            if self.stream.ended:
                break
        await self._finish()

    async def _finish(self) -> None:
        if self.stream.ended and self.stored is not None:
            await finalize(self.state, self.stored, self.stream)
        if self.stream.status == "failed":  # e.g. a regenerated turn diverged: stop generating
            await cancel_session(self.state, self.sid)

    async def sse(self, cancel_on_leave: bool) -> AsyncIterator[bytes]:
        """The SSE body (see the module doc)."""
        try:
            async for event in self.events():
                yield sse_typed(event)
        except Dropped as exc:
            # a stored response keeps generating for the reader to resume; one not stored cannot be read again
            cancel_on_leave = cancel_on_leave and self.stored is None
            then = (f"resume with GET /v1/responses/{self.stream.head.response_id}?stream=true&starting_after="
                    f"{self.stream.seq}" if self.stored is not None else
                    "the response is cancelled (it was not stored, so it cannot be resumed)")
            yield sse_typed({"type": "error", "sequence_number": self.stream.seq + 1, "code": "relay_dropped",
                             "message": f"the event relay dropped this stream ({exc.reason}); {then}",
                             "param": None})
        finally:
            await self._release(cancel_on_leave)

    async def collect(self, request: Request) -> JSONResponse:
        """The final Response object; a client that leaves first cancels the response."""
        try:
            outcome = await while_connected(self._drain(), request)
        finally:
            await self._release(True)
        if isinstance(outcome.error, Dropped):
            raise ApiError(503, "the event relay dropped this request", type="server_error", code="relay_dropped")
        if outcome.error is not None:
            raise outcome.error
        return JSONResponse(self.stream.snapshot())

    async def follow(self) -> None:
        """Consume to the end with no client (background); the gateway stopping ends it quietly."""
        try:
            await self._drain()
        except Dropped as exc:
            log.info("sid=%s background response left unfollowed (%s)", self.sid, exc.reason)
        except Exception:  # a background task's outermost boundary: log, never crash the gateway
            log.exception("sid=%s background response follower failed", self.sid)
        finally:
            await self._release(False)

    async def _drain(self) -> None:
        async for _ in self.events():
            pass

    async def _release(self, cancel: bool) -> None:
        self.state.relay.unsubscribe(self.sub)
        if cancel and not self.stream.ended:
            await cancel_session(self.state, self.sid)


def spawn_follower(state: Any, run: ResponseRun) -> None:
    """Run ``run.follow()`` as a task the app keeps until it ends."""
    task = asyncio.create_task(run.follow(), name=f"response-{run.sid}")
    state.followers.add(task)
    task.add_done_callback(state.followers.discard)


async def cancel_session(state: Any, sid: str) -> None:
    """End a response's session with reason "cancelled" (no-op once it ended)."""
    info = await state.ops.sessions.get(sid)
    if info is not None and info.status is Status.ACTIVE:
        await state.ops.cancel_unchecked(sid, info.turn)
