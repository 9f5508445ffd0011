"""One session in flight through one API's translator, for every API over the relay (chat
completions, Messages, Responses).

``open_session`` writes a oneshot request's session (one turn whose tools are all client
tools), subscribes to its events and queues its turn (routed to the decoder holding the
conversation's prefix); a Responses request opens its own session and subscribes with
``Run.open``.  A ``Run`` relays the session's events, from its first, through the API's pure
translator (``gateway.translator.Translator``: ``start()``, ``feed(event)`` and ``finish()``
return items, ``ended`` says the output is complete: the session's end, a oneshot turn's own end):

* ``stream`` -- an SSE body: each item framed by the API; a failure (the session failed, a
  regenerated turn diverged, the relay dropped us) framed by the API's ``fail``; with
  ``idle_s``, ``idle`` bytes after each quiet ``idle_s`` (keep-alives).  The frames of every
  event already queued go out in one write (at most ``WRITE_BATCH``): a stream interval that
  adapts -- when the gateway keeps up each event is written at once (time to first token is never
  traded), when it falls behind it writes several tokens per send;
* ``collect`` -- to the end, for a non-streamed response: None when done (the translator holds
  the result), else the ``ApiError`` to answer with;
* ``follow`` -- to the end with nobody listening (a background response).

A client that leaves before the session ended cancels it, which stops generation -- unless the
API says the session goes on (``cancel=False``: a background response; ``resumable``: a stored
response the relay dropped, which its client resumes).  ``on_end`` runs once the translator saw
the session end (a stored response is finalized there).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from fastapi import Request

from gateway.auth import Principal
from gateway.errors import ApiError
from gateway.relay import Dropped, Subscription
from gateway.sessions.ops import SessionOps
from gateway.sse import Last, while_connected
from gateway.translator import Diverged, Translator, UpstreamError
from runtime.routing import conversation_key
from runtime.session import SessionMode, Status, new_sid

log = logging.getLogger(__name__)

WRITE_BATCH = 64  # frames written together at most (a long history replayed while live events queue)
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


async def create_session(state: Any, who: Principal, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                         client_tools: list[str], params: dict[str, Any], max_tokens_sent: bool, meta: dict[str, Any],
                         max_turns: int = 1, mode: SessionMode = SessionMode.ONESHOT) -> str:
    """Check that the prompt fits the context (``fitted``), then write the session (not started yet)."""
    ops: SessionOps = state.ops
    return await ops.create(who, messages, tools=tools, client_tools=client_tools,
                            params=await fitted(state, messages, tools, params, max_tokens_sent),
                            max_turns=max_turns, meta=meta, mode=mode)


async def fitted(state: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]], params: dict[str, Any],
                 max_tokens_sent: bool) -> dict[str, Any]:
    """``params`` once the prompt is found to fit the context (``gateway.context``: a 400 when not; an
    unsent max_tokens is lowered to the room left)."""
    max_tokens = await state.context.fits(messages, tools, max_tokens=params["max_tokens"], sent=max_tokens_sent,
                                          prefill=params.get("prefill") or "")
    return {**params, "max_tokens": max_tokens}


async def open_session(state: Any, who: Principal, plan: Plan, *,
                       max_tokens_sent: bool = True) -> tuple[str, Subscription]:
    """Create a oneshot request's session (``create_session``), subscribe to its events from the
    start, and queue its turn, in round trips shared with whatever other requests send meanwhile:
    one when the turn's stream needs no routing lookup (``SessionOps.settled_route``: one live
    decoder), the session's writes and the job together (``SessionOps.open``); else two, the writes
    with the lookup, then the job (with the relay's wake where its read blocks in the server)."""
    route_key = conversation_key(plan.messages, plan.tools)
    stream = state.ops.settled_route(route_key=route_key)
    if stream is not None:
        return await _open_settled(state, who, plan, stream, max_tokens_sent)
    sid, stream = await asyncio.gather(
        create_session(state, who, plan.messages, plan.tools, client_tools=[t["function"]["name"] for t in plan.tools],
                       params=plan.params, max_tokens_sent=max_tokens_sent, meta=plan.meta),
        state.ops.route(route_key=route_key))
    return sid, await _watched(state, sid, lambda: state.ops.queue(sid, stream, one_turn=True))


async def _open_settled(state: Any, who: Principal, plan: Plan, stream: str,
                        max_tokens_sent: bool) -> tuple[str, Subscription]:
    """``open_session`` when the turn's stream is known: the context check, the watch of a session not
    written yet (it has no events), then the session and its job in one round trip."""
    params = await fitted(state, plan.messages, plan.tools, plan.params, max_tokens_sent)
    sid = new_sid()
    return sid, await _watched(state, sid, lambda: state.ops.open(
        sid, who, plan.messages, stream, tools=plan.tools, client_tools=[t["function"]["name"] for t in plan.tools],
        params=params, meta=plan.meta))


async def _watched(state: Any, sid: str, start: Callable[[], Awaitable[None]]) -> Subscription:
    """A watch of ``sid``'s events from its first (not started yet: none), then ``start()``, which queues
    its turn; if that fails (redis went away: a 503; the client left), the relay keeps no watch."""
    sub = await _subscribe(state, sid, fresh=True)
    try:
        await start()
    except BaseException:
        state.relay.unsubscribe(sub)
        raise
    return sub


def failure(exc: Exception) -> ApiError:
    """The error a relayed request answers with when its session failed or its relay dropped it."""
    if isinstance(exc, Dropped):
        return ApiError(503, f"the event relay dropped this request ({exc.reason})", type="server_error",
                        code="relay_dropped")
    if isinstance(exc, UpstreamError) and exc.code == "context_length_exceeded":  # a decoder measured it
        return ApiError(400, str(exc), param="messages", code=exc.code)
    return ApiError(500, f"generation failed: {exc}", type="server_error", code="generation_failed")


async def _subscribe(state: Any, sid: str, fresh: bool = False) -> Subscription:
    """The session's events from its first one, to its first end (``stop_turn=0``: a session that
    runs its own loop ends once); ``fresh``: written just now and not started (``Relay.subscribe``)."""
    return await state.relay.subscribe(sid, (0, 0), stop_turn=0, fresh=fresh)


async def cancel_session(state: Any, sid: str) -> None:
    """End a session that is still running with reason "cancelled" (no-op once it ended)."""
    info = await state.ops.sessions.get(sid)
    if info is not None and info.status is Status.ACTIVE:
        await state.ops.cancel_unchecked(sid, info.turn)


class Run:
    """Relays one session's events through ``translator`` (see the module doc)."""

    def __init__(self, state: Any, sub: Subscription, sid: str, translator: Translator, *,
                 on_end: Callable[[], Awaitable[None]] | None = None, resumable: bool = False) -> None:
        self.state, self.sub, self.sid, self.translator = state, sub, sid, translator
        self.on_end, self.resumable = on_end, resumable

    @classmethod
    async def open(cls, state: Any, sid: str, translator: Translator, **kw: Any) -> Run:
        """Subscribe to the events of a session already written."""
        return cls(state, await _subscribe(state, sid), sid, translator, **kw)

    async def stream(self, frame: Callable[[Any], bytes], fail: Callable[[Exception], bytes], *,
                     idle_s: float | None = None, idle: bytes = b"", cancel: bool = True,
                     tail: bytes = b"") -> AsyncIterator[bytes]:
        """The SSE body (see the module doc).  Per token: the translator's items, each framed, written with
        the frames of any event queued behind it.  The last write (the output's end, or the failure)
        is ``sse.Last``, ending with ``tail`` (chat completions' ``[DONE]``): it leaves with the end of the
        body, in one send."""
        t, sub = self.translator, self.sub
        finished = False
        out: list[bytes] = []
        try:
            out += map(frame, t.start())
            if out:  # the stream's head goes at once, before any event
                yield b"".join(out)
                out.clear()
            async for f in sub.frames(idle_s):
                if f is None:
                    yield idle
                    continue
                out += map(frame, t.feed(f.event))
                if t.ended:
                    break
                if out and (len(out) >= WRITE_BATCH or not sub.backlog()):
                    yield b"".join(out)
                    out.clear()
            out += map(frame, t.finish())
            await self._ended()
            finished = True
            out.append(tail)
            yield Last(b"".join(out))
        except FAILURES as exc:  # the stream ends here
            out += (fail(exc), tail)
            yield Last(b"".join(out))
        finally:
            # a run the relay dropped (slow, shutdown) whose client resumes goes on: whether the drop
            # ended this body with Dropped or, while it waited on a slow client, by cancelling it
            await self._release(cancel and not finished and not (self.resumable and self.sub.ended.is_set()))

    async def collect(self, request: Request) -> ApiError | None:
        """Relay to the end (cancelled if the client leaves); None when it completed."""
        outcome = None
        try:
            outcome = await while_connected(self._drain(), request)
        finally:
            await self._release(outcome is None or not outcome.completed)
        if outcome.left:
            return failure(Dropped("client disconnected", self.sub.last_id))
        if outcome.error is None:
            return None
        if isinstance(outcome.error, FAILURES):
            return failure(outcome.error)
        raise outcome.error

    async def follow(self) -> None:
        """Relay to the end with no client (background); the gateway stopping ends it quietly."""
        try:
            await self._drain()
        except Dropped as exc:
            log.info("sid=%s background response left unfollowed (%s)", self.sid, exc.reason)
        except Exception:  # a background task's outermost boundary: log, never crash the gateway
            log.exception("sid=%s background response follower failed", self.sid)
        finally:
            await self._release(False)

    def spawn(self) -> None:
        """``follow()`` as a task the gateway keeps until it ends."""
        task = asyncio.create_task(self.follow(), name=f"follow-{self.sid}")
        self.state.followers.add(task)
        task.add_done_callback(self.state.followers.discard)

    async def _drain(self) -> None:
        """Translate to the session's end with nobody reading (raises as ``stream`` fails)."""
        t = self.translator
        t.start()
        async for f in self.sub.frames():
            t.feed(f.event)
            if t.ended:
                break
        t.finish()
        await self._ended()

    async def _ended(self) -> None:
        if self.on_end is not None:
            await self.on_end()

    async def _release(self, cancel: bool) -> None:
        self.state.relay.unsubscribe(self.sub)
        if cancel and not self.translator.ended:
            await cancel_session(self.state, self.sid)  # nobody is listening: stop generating
