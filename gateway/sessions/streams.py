"""A session's live event stream: ``WS /v1/sessions/{id}/ws`` and SSE ``GET /v1/sessions/{id}/events``.

Both relay ``ts:s:{sid}:ev`` through the process's shared reader (``gateway.relay``), from
``after`` (query ``?after=ID``; for SSE also the ``Last-Event-ID`` header) to the session's
next ``session.ended`` event, then close -- at once when there is none to wait for (the session
has ended and ``after`` is at or past its end).  Every frame is one event as JSON with its stream
``id``; a client that reconnects with the last id it received gets every later event
exactly once.

WebSocket protocol (text frames; the key is checked before the upgrade, see ``gateway.auth``):

    server -> client   {"id", "sid", "turn", "attempt", "seq", "src", "ts", "body": {"type", ...}}   an event
                       {"type": "ack", "ref": "tool_result" | "cancel", ...}                       a reply
                       {"type": "error", "error": {"message", "type", "param", "code"}}           a refusal
    client -> server   {"type": "tool_result", "tool_call_id", "content", "is_error"?}
                       {"type": "cancel"}

Close codes: 1000 the session ended; 4008 this client fell ``relay_queue_size`` events
behind -- reconnect with ``after=<last id received>``; 1012 the gateway is shutting down.
Refused upgrades get an HTTP error response (401, 404, 429, 400) in OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Header, Query, Request, WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from gateway import errors, strict_json
from gateway.auth import Principal, reject, select_subprotocol
from gateway.openai.bodies import ToolResultIn
from gateway.errors import ApiError
from gateway.frames import InvalidStreamId, StreamId, parse_id
from gateway.relay import Dropped, Relay, Subscription
from gateway.sessions.ops import SessionOps
from gateway.sse import EventStreamResponse, sse_comment, sse_event
from gateway.state import GatewayState, gateway_state

log = logging.getLogger(__name__)
router = APIRouter(tags=["sessions"])

CLOSE_SLOW = 4008
CLOSE_RESTART = 1012
SSE_KEEPALIVE_S = 15.0
REPLY_GRACE_S = 2.0


def parse_after(after: str | None) -> StreamId:
    try:
        return parse_id(after or "0-0")
    except InvalidStreamId as exc:
        raise ApiError(400, str(exc), param="after", code="invalid_event_id") from None


# --------------------------------------------------------------------------- SSE
@router.get("/v1/sessions/{sid}/events", response_class=EventStreamResponse, operation_id="sessionEvents",
            responses={200: {"content": {"text/event-stream": {}}, "description": "one SSE event per session event"}})
async def session_events(sid: str, request: Request, after: str | None = Query(None, max_length=48),
                         last_event_id: str | None = Header(None, max_length=48)) -> EventStreamResponse:
    """The session's events as Server-Sent Events (``id:`` is the event id; resume with Last-Event-ID)."""
    who: Principal = request.state.principal
    start = parse_after(last_event_id or after)
    state = gateway_state(request)
    info = await state.ops.owned(sid, who)
    relay = state.relay
    sub = await relay.subscribe(sid, start, stop_turn=info.turn, session_over=info.status != "active")
    return EventStreamResponse(_sse_body(relay, sub), abort=sub.ended)


async def _sse_body(relay: Relay, sub: Subscription) -> AsyncIterator[bytes]:
    try:
        async for frame in sub.frames(idle_s=SSE_KEEPALIVE_S):
            yield sse_comment("keep-alive") if frame is None else sse_event(frame.data, frame.id)
    except Dropped as exc:
        log.info("sid=%s sse subscriber dropped (%s) at %s", sub.session, exc.reason, exc.last_id)
    finally:
        relay.unsubscribe(sub)


# --------------------------------------------------------------------------- WebSocket
@router.websocket("/v1/sessions/{sid}/ws")
async def session_ws(ws: WebSocket, sid: str, after: str | None = Query(None)) -> None:
    who: Principal = ws.scope["state"]["principal"]
    state = gateway_state(ws)
    try:
        start = parse_after(after)
        info = await state.ops.owned(sid, who)
    except ApiError as err:
        await reject(ws.scope, ws.receive, ws.send, err)
        return
    await ws.accept(subprotocol=select_subprotocol(ws.scope))
    sub = await state.relay.subscribe(sid, start, stop_turn=info.turn, session_over=info.status != "active")
    try:
        await WsSession(ws, sub, state.ops, who, state).run()
    finally:
        state.relay.unsubscribe(sub)


class WsSession:
    """One WebSocket: the pump (events out), the receiver (client messages in; notices a
    disconnect at once) and the drop signal run together; the first to finish ends the rest."""

    def __init__(self, ws: WebSocket, sub: Subscription, ops: SessionOps, who: Principal, state: GatewayState) -> None:
        self.ws, self.sub, self.ops, self.who, self.state = ws, sub, ops, who, state
        self.send_lock = asyncio.Lock()
        self.handling: asyncio.Future | None = None  # the client message being answered

    async def run(self) -> None:
        pump = asyncio.create_task(self._pump())
        receive = asyncio.create_task(self._receive())
        dropped = asyncio.create_task(self.sub.ended.wait())
        done, pending = await asyncio.wait({pump, receive, dropped}, return_when=asyncio.FIRST_COMPLETED)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if receive not in done and self.handling is not None:
            await asyncio.wait({self.handling}, timeout=REPLY_GRACE_S)  # e.g. the ack of a cancel
        await self._close(pump, receive, done)

    async def _close(self, pump: asyncio.Task, receive: asyncio.Task, done: set[asyncio.Task]) -> None:
        code_reason = self._close_code(pump, receive, done)
        if code_reason is None:
            return  # the client left
        try:
            await self.ws.close(*code_reason)
        except (RuntimeError, WebSocketDisconnect, OSError):
            pass  # already closed underneath us

    def _close_code(self, pump: asyncio.Task, receive: asyncio.Task, done: set[asyncio.Task]) -> tuple[int, str] | None:
        """Why the socket closes: None when the client left, else (code, reason)."""
        resume = f"reconnect with after={self.sub.last_id}"
        failed = receive if receive in done else pump if pump in done and not self.sub.ended.is_set() else None
        if failed is not None and failed.exception() is not None:
            log.warning("sid=%s websocket failed: %r", self.sub.session, failed.exception())
            return 1011, "internal error; " + resume
        if receive in done:
            return None
        if self.sub.ended.is_set():
            return (CLOSE_RESTART, "gateway shutting down") if self.sub.reason == "shutdown" else \
                (CLOSE_SLOW, "slow consumer; " + resume)
        return 1000, "session ended"

    async def _pump(self) -> None:
        try:
            async for frame in self.sub.frames():
                async with self.send_lock:
                    await self.ws.send_text(frame.data.decode())
        except Dropped:
            await asyncio.Event().wait()  # the drop signal task closes the socket

    async def _send_json(self, obj: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.ws.send_text(json.dumps(obj))

    async def _receive(self) -> None:
        """Handle client messages until the client disconnects."""
        while True:
            msg = await self.ws.receive()
            if msg["type"] == "websocket.disconnect":
                return
            data = msg.get("text")
            if data is None:
                data = msg.get("bytes") or b""
            self.handling = asyncio.ensure_future(self._on_message(data))
            await asyncio.shield(self.handling)  # a reply in progress survives the end of the stream

    async def _on_message(self, data: str | bytes) -> None:
        try:
            await self.state.limiter.take(self.who)
            reply = await self._dispatch(_json_object(data))
        except ApiError as err:
            await self._send_json({"type": "error", **err.body()})
            return
        await self._send_json(reply)

    async def _dispatch(self, msg: dict[str, Any]) -> dict[str, Any]:
        kind = msg.get("type")
        if kind == "tool_result":
            item = _tool_result(msg)
            status = await self.ops.tool_result(self.sub.session, self.who, item.tool_call_id, item.text,
                                                item.is_error)
            return {"type": "ack", "ref": "tool_result", "tool_call_id": item.tool_call_id, "status": status}
        if kind == "cancel":
            status = await self.ops.cancel(self.sub.session, self.who)
            return {"type": "ack", "ref": "cancel", "status": status}
        raise ApiError(400, f"unknown message type {str(kind)[:40]!r}; expected tool_result or cancel",
                       param="type", code="invalid_value")


def _json_object(data: str | bytes) -> dict[str, Any]:
    msg = strict_json.loads(data)
    if not isinstance(msg, dict):
        raise ApiError(400, "message must be a JSON object", code="invalid_value")
    return msg


def _tool_result(msg: dict[str, Any]) -> ToolResultIn:
    try:
        return ToolResultIn.model_validate({k: v for k, v in msg.items() if k != "type"})
    except ValidationError as exc:
        raise errors.invalid(exc.errors(), msg) from None
