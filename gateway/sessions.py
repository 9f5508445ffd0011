"""Session API: create a session (server-side agent loop), read it, follow its events.

    POST /v1/sessions                    -> {"id", "ws_url", "events_url"}
    GET  /v1/sessions/{id}               -> status, turn, messages
    WS   /v1/sessions/{id}/ws?after=ID   -> one JSON text frame per event, resumable
    GET  /v1/sessions/{id}/events        -> the same as SSE (``Last-Event-ID`` resumes)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator, Literal

import msgspec
from fastapi import APIRouter, HTTPException, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from schemas import keys
from schemas.codec import UndecodableEntry, decode_event, encode, to_builtins
from schemas.events import SessionEnded, StartTurn
from workers import bus
from workers.session import new_sid

log = logging.getLogger(__name__)
router = APIRouter()
_json = msgspec.json.Encoder()


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = Field(default=None, max_length=200_000)
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class CreateSession(BaseModel):
    messages: list[Message] = Field(min_length=1, max_length=256)
    tools: list[str | dict[str, Any]] | None = Field(default=None, max_length=128)
    max_turns: int = Field(default=8, ge=1, le=64)
    max_tokens: int = Field(default=256, ge=1, le=32_768)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop: list[str] | None = Field(default=None, max_length=8)
    replay: list[str] | None = Field(default=None, max_length=64)  # ReplayEngine script (tests, benchmarks)


def _tools(app_state: Any, requested: list[str | dict[str, Any]] | None) -> list[dict[str, Any]]:
    registry = app_state.registry
    if requested is None:
        return registry.openai_tools()
    out: list[dict[str, Any]] = []
    for t in requested:
        if isinstance(t, str):
            if registry.get(t) is None:
                raise HTTPException(400, f"tools: unknown server tool {t!r}; known: {registry.names()}")
            out += registry.openai_tools([t])
        else:
            out.append(t)
    return out


@router.post("/v1/sessions", status_code=201)
async def create_session(body: CreateSession, request: Request) -> dict[str, Any]:
    state = request.app.state
    sid = new_sid()
    params = {"max_tokens": body.max_tokens, "temperature": body.temperature, "top_p": body.top_p,
              "seed": body.seed, "stop": body.stop}
    meta = {"replay": body.replay} if body.replay else {}
    await state.sessions.create(sid, [m.model_dump(exclude_none=True) for m in body.messages],
                                key=getattr(request.state, "key_id", ""), tools=_tools(state, body.tools),
                                params=params, max_turns=body.max_turns, meta=meta)
    await bus.add(state.redis, keys.DECODE_JOBS, encode(StartTurn(sid=sid, turn=0)))
    log.info("sid=%s created (%d messages)", sid, len(body.messages))
    return {"id": sid, "ws_url": f"/v1/sessions/{sid}/ws", "events_url": f"/v1/sessions/{sid}/events"}


@router.get("/v1/sessions/{sid}")
async def read_session(sid: str, request: Request) -> dict[str, Any]:
    info = await request.app.state.sessions.get(sid)
    if info is None:
        raise HTTPException(404, f"session {sid!r} not found")
    return {"id": sid, "status": info.status, "turn": info.turn, "max_turns": info.max_turns,
            "messages": await request.app.state.sessions.messages(sid)}


async def session_events(state: Any, sid: str, after: str) -> AsyncIterator[tuple[str, bytes, bool]]:
    """(entry id, JSON frame, is_last) of a session's events after ``after``, live."""
    while True:
        for entry in await bus.tail(state.redis, keys.events(sid), after, block_ms=1000):
            after = entry.id
            try:
                ev = decode_event(entry.data)
            except UndecodableEntry as exc:
                log.warning("sid=%s undecodable event %s: %s", sid, entry.id, exc)
                continue
            frame = dict(to_builtins(ev), id=entry.id)
            yield entry.id, _json.encode(frame), isinstance(ev.body, SessionEnded)
            if isinstance(ev.body, SessionEnded):
                return


async def _require(state: Any, sid: str) -> None:
    if not await state.redis.exists(keys.session(sid)):
        raise HTTPException(404, f"session {sid!r} not found")


@router.websocket("/v1/sessions/{sid}/ws")
async def session_ws(ws: WebSocket, sid: str, after: str = Query("0-0")) -> None:
    state = ws.app.state
    if not await state.redis.exists(keys.session(sid)):
        await ws.close(code=4404, reason="session not found")
        return
    await ws.accept()
    pump = asyncio.create_task(_pump(ws, state, sid, after))
    watch = asyncio.create_task(_watch(ws))
    done, pending = await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if pump in done and pump.exception() is None:
        await ws.close()


async def _pump(ws: WebSocket, state: Any, sid: str, after: str) -> None:
    async for _, frame, _last in session_events(state, sid, after):
        await ws.send_text(frame.decode())


async def _watch(ws: WebSocket) -> None:
    """Notice a disconnect at once (a send-only handler never would)."""
    try:
        while True:
            await ws.receive_text()
    except WebSocketDisconnect:
        return


@router.get("/v1/sessions/{sid}/events")
async def session_sse(sid: str, request: Request, after: str = Query("0-0")) -> StreamingResponse:
    state = request.app.state
    await _require(state, sid)
    after = request.headers.get("last-event-id", after)

    async def gen() -> AsyncIterator[bytes]:
        async for entry_id, frame, _last in session_events(state, sid, after):
            yield b"id: " + entry_id.encode() + b"\ndata: " + frame + b"\n\n"

    return StreamingResponse(gen(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
