"""One oneshot session in flight, whichever public API asked for it (chat completions, Messages).

A oneshot request is a session of one turn whose tools are all client tools.  ``open_session``
writes it, subscribes to its events and queues its turn (routed to the decoder holding the
conversation's prefix); ``OneshotRun`` relays those events through the API's pure translator
(``feed(event) -> items``, ``finish() -> items``, ``ended``):

* ``stream`` -- an SSE body: each item framed by the API; a failure (the session failed, a
  regenerated turn diverged, the relay dropped us) framed as the API's in-stream error; with
  ``idle_s``, ``idle`` bytes after each quiet ``idle_s`` (keep-alives);
* ``collect`` -- the whole turn, for a non-streamed response: None when done (the
  translator holds the result), else the ``ApiError`` to answer with.

Either way, a client that leaves before the session ended cancels it, which stops generation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from fastapi import Request

from gateway.auth import Principal
from gateway.errors import ApiError
from gateway.relay import Dropped, Relay, Subscription
from gateway.sessions.ops import SessionOps
from gateway.sse import while_connected
from gateway.translator import Diverged, Translator, UpstreamError
from runtime.routing import conversation_key
from runtime.session import SessionMode

FAILURES = (UpstreamError, Diverged, Dropped)


class Plan(Protocol):
    """A validated request, as a oneshot session."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    params: dict[str, Any]
    meta: dict[str, Any]


def offered(plan: Plan) -> frozenset[str]:
    """The functions a request offers: its calls of any other are never returned."""
    return frozenset(t["function"]["name"] for t in plan.tools)


async def open_session(state: Any, who: Principal, plan: Plan, *,
                       max_tokens_sent: bool = True) -> tuple[str, Subscription]:
    """Check that the prompt fits the context (``gateway.context``: a 400 when not; an unsent
    max_tokens is lowered to the room left), then create the session, subscribe to its events
    from the start, and queue its turn."""
    max_tokens = await state.context.fits(plan.messages, plan.tools, max_tokens=plan.params["max_tokens"],
                                          sent=max_tokens_sent, prefill=plan.params.get("prefill") or "")
    ops: SessionOps = state.ops
    names = [t["function"]["name"] for t in plan.tools]
    sid = await ops.create(who, plan.messages, tools=plan.tools, client_tools=names,
                           params={**plan.params, "max_tokens": max_tokens}, max_turns=1, meta=plan.meta,
                           mode=SessionMode.ONESHOT)
    sub = await state.relay.subscribe(sid, (0, 0), stop_turn=0)
    try:
        await ops.start(sid, route_key=conversation_key(plan.messages, plan.tools))
    except BaseException:  # redis went away (a 503), or the client left: the relay must not keep the watch
        state.relay.unsubscribe(sub)
        raise
    return sid, sub


def failure(exc: Exception) -> ApiError:
    """The error a relayed request answers with when its session failed or its relay dropped it."""
    if isinstance(exc, Dropped):
        return ApiError(503, f"the event relay dropped this request ({exc.reason})", type="server_error",
                        code="relay_dropped")
    if isinstance(exc, UpstreamError) and exc.code == "context_length_exceeded":  # a decoder measured it
        return ApiError(400, str(exc), param="messages", code=exc.code)
    return ApiError(500, f"generation failed: {exc}", type="server_error", code="generation_failed")


class OneshotRun:
    """Relays one oneshot session's events through ``translator`` (see the module doc)."""

    def __init__(self, state: Any, sub: Subscription, sid: str, translator: Translator) -> None:
        self.ops: SessionOps = state.ops
        self.relay: Relay = state.relay
        self.sub, self.sid, self.translator = sub, sid, translator

    async def stream(self, frame: Callable[[Any], bytes], fail: Callable[[ApiError], bytes], *,
                     idle_s: float | None = None, idle: bytes = b"") -> AsyncIterator[bytes]:
        """The SSE body.  Leaving early, or a failure that ends the stream (the relay dropped it, a
        regenerated turn diverged), cancels the session: nobody can read the rest of a oneshot turn."""
        finished = False
        try:
            async for f in self.sub.frames(idle_s):
                if f is None:
                    yield idle
                    continue
                for item in self.translator.feed(f.event):
                    yield frame(item)
            for item in self.translator.finish():
                yield frame(item)
            finished = True
        except FAILURES as exc:  # the stream ends here: a session still generating is cancelled
            yield fail(failure(exc))
        finally:
            await self._release(finished)

    async def collect(self, request: Request) -> ApiError | None:
        """Relay the whole turn (cancelled if the client leaves); None when it completed."""
        outcome = None
        try:
            outcome = await while_connected(self._consume(), request)
        finally:
            await self._release(outcome is not None and outcome.completed)
        if outcome.left:
            return failure(Dropped("client disconnected", self.sub.last_id))
        if outcome.error is None:
            return None
        if isinstance(outcome.error, FAILURES):
            return failure(outcome.error)
        raise outcome.error

    async def _consume(self) -> None:
        async for f in self.sub.frames():
            self.translator.feed(f.event)

    async def _release(self, finished: bool) -> None:
        self.relay.unsubscribe(self.sub)
        if not finished and not self.translator.ended:
            await self.ops.cancel_unchecked(self.sid, 0)  # nobody is listening: stop generating
