"""Server-Sent Events: framing, and a streaming response that notices a disconnect at once.

Starlette's ``StreamingResponse`` stops listening for ``http.disconnect`` on ASGI servers
that speak spec 2.4, so an idle stream would only notice a gone client at its next write.
``EventStreamResponse`` always listens, and also stops when ``abort`` is set (the relay
dropped the subscriber); either way the body iterator is closed, running its ``finally``.
``while_connected`` does the same for a request answered at once (a non-streaming one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import StreamingResponse

_json = msgspec.json.Encoder()


def sse_event(data: bytes, event_id: str | None = None, name: str | None = None) -> bytes:
    """One SSE event whose data is a single line (JSON): ``id:`` and ``event:`` lines when given."""
    head = b"id: " + event_id.encode() + b"\n" if event_id else b""
    head += b"event: " + name.encode() + b"\n" if name else b""
    return head + b"data: " + data + b"\n\n"


def sse_json(obj: Any) -> bytes:
    """``obj`` as one ``data:`` event (chat completion chunks)."""
    return sse_event(_json.encode(obj))


def sse_typed(event: dict[str, Any]) -> bytes:
    """``event`` framed as the Anthropic and Responses streams frame theirs: its ``type`` as the event
    name, then the JSON."""
    return sse_event(_json.encode(event), name=event["type"])


def sse_comment(text: str) -> bytes:
    return b": " + text.encode() + b"\n\n"


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class Last(bytes):
    """A body's final bytes: ``EventStreamResponse`` sends them with the body's end, in one write (the
    end of a chunked body is otherwise a write of its own), and reads nothing after them."""


class EventStreamResponse(StreamingResponse):
    """``text/event-stream`` that ends when the body ends (or yields its ``Last`` bytes), the client
    leaves, or ``abort`` is set."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes], abort: asyncio.Event | None = None,
                 headers: dict[str, str] | None = None, status_code: int = 200) -> None:
        super().__init__(content, status_code=status_code, headers={**SSE_HEADERS, **(headers or {})})
        self.abort = abort or asyncio.Event()

    async def stream_response(self, send: Any) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self.body_iterator:
            if not isinstance(chunk, bytes | memoryview):
                chunk = chunk.encode(self.charset)
            if isinstance(chunk, Last):
                await send({"type": "http.response.body", "body": chunk, "more_body": False})
                return
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        started = finished = False

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal started, finished
            started = True
            await send(message)  # finished once sent: a send cancelled while it waits wrote nothing
            finished = finished or (message["type"] == "http.response.body" and not message.get("more_body"))

        body = asyncio.create_task(self.stream_response(tracked))
        gone = asyncio.create_task(self.listen_for_disconnect(receive))
        aborted = asyncio.create_task(self.abort.wait())
        try:
            done, _ = await asyncio.wait({body, gone, aborted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (body, gone, aborted):
                t.cancel()
            await asyncio.gather(body, gone, aborted, return_exceptions=True)
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        if body in done and body.exception() is not None:
            raise body.exception()
        if started and not finished and gone not in done:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


@dataclass(frozen=True)
class Outcome:
    """How work run ``while_connected`` ended: the client ``left`` first (the work was cancelled), or it
    finished, raising ``error`` or not."""

    left: bool
    error: BaseException | None = None

    @property
    def completed(self) -> bool:
        return not self.left and self.error is None


async def while_connected(work: Coroutine[Any, Any, Any], request: Request) -> Outcome:
    """Run ``work`` until it ends or the client disconnects (it is then cancelled)."""
    task = asyncio.create_task(work)
    gone = asyncio.create_task(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, gone):
            t.cancel()
        await asyncio.gather(task, gone, return_exceptions=True)
    return Outcome(left=True) if task.cancelled() else Outcome(left=False, error=task.exception())


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
