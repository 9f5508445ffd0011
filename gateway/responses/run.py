"""Relaying one response: its session's events through ``gateway.runner.Run``, translated by
``ResponseStream``.

Every relay starts from the session's first event and re-translates, so the sequence numbers
are the same for every reader; a resuming client's stream leaves out the events it already has
(``ResponseStream(after=starting_after)``).  What is the Responses API's own:

* a stored response is finalized when the relay sees its session end (``gateway.responses.read``),
  and a failed one (a regenerated turn diverged) is cancelled, which stops generation;
* a relay drop ends the stream with an ``error`` event: a stored response goes on and its client
  resumes with ``starting_after``; one not stored (``store: false``) is cancelled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.responses.format import ResponseStream
from gateway.responses.read import finalize
from gateway.responses.store import StoredResponse
from gateway.runner import Run, cancel_session
from gateway.sse import sse_typed


async def open_run(state: Any, sid: str, stream: ResponseStream, stored: StoredResponse | None) -> Run:
    """A run of the response's session (see the module doc)."""

    async def on_end() -> None:
        if stream.ended and stored is not None:
            await finalize(state, stored, stream)
        if stream.status == "failed":
            await cancel_session(state, sid)

    return await Run.open(state, sid, stream, on_end=on_end, resumable=stored is not None)


def sse(run: Run, stream: ResponseStream, stored: StoredResponse | None, cancel: bool) -> AsyncIterator[bytes]:
    """The SSE body: ``event: <type>`` / ``data: <json>`` pairs until the terminal event."""

    def fail(exc: Exception) -> bytes:  # the relay dropped the run (the translator fails a response itself)
        then = (f"resume with GET /v1/responses/{stream.head.response_id}?stream=true&starting_after={stream.seq}"
                if stored is not None else "the response is cancelled (it was not stored, so it cannot be resumed)")
        reason = getattr(exc, "reason", exc)
        return sse_typed({"type": "error", "sequence_number": stream.seq + 1, "code": "relay_dropped",
                          "message": f"the event relay dropped this stream ({reason}); {then}", "param": None})

    return run.stream(sse_typed, fail, cancel=cancel)
