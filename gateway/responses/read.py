"""Reading stored responses: ownership, the current Response object, and finalization.

A stored response's object is its final one once a gateway saw its session end; before that
it is translated from the session's event log as it stands (``current``), with the same
translator the stream uses, so a poll and a stream always agree.  Whoever first sees the
session end -- a streaming or waiting request, the background follower, a poll -- writes the
final object and the conversation (``finalize``; first writer wins, the content is
deterministic).  A response whose session expired before anyone finalized it (its gateway
died and nobody asked for ``session_ttl_s``) is gone: 404.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.errors import ApiError, not_found
from gateway.frames import Seen, fmt_id, make_frame, parse_id
from gateway.relay import HISTORY_PAGE
from gateway.responses.format import ResponseStream
from gateway.responses.store import ResponseStore, StoredResponse
from runtime import bus
from schemas import keys
from schemas.events import Event


def sid_of(response_id: str) -> str | None:
    """The session id inside ``resp_<sid>`` (None when it cannot be one)."""
    sid = response_id.removeprefix("resp_")
    return sid if response_id.startswith("resp_") and 0 < len(sid) <= 64 and sid.isalnum() else None


def not_stored(response_id: str) -> ApiError:
    return not_found(f"response {response_id[:64]!r}", "response_not_found")


async def owned(state: Any, response_id: str, key: str) -> StoredResponse:
    """The stored response ``response_id`` if it exists and belongs to ``key``; else a 404."""
    sid = sid_of(response_id)
    stored = await store_of(state).get(sid) if sid else None
    if stored is None or stored.key != key:
        raise not_stored(response_id)
    return stored


def store_of(state: Any) -> ResponseStore:
    return ResponseStore(state.redis, state.cfg.response_ttl_s)


async def log_events(r: Any, sid: str) -> AsyncIterator[Event]:
    """The session's event log as it stands, oldest first, as a subscriber sees it (``Seen``)."""
    after = "-"
    seen = Seen()
    while True:
        rows = await r.xrange(keys.events(sid), min=after, max="+", count=HISTORY_PAGE)
        for raw_id, fields in rows:
            frame = make_frame(fmt_id(parse_id(raw_id)), fields.get(bus.FIELD, b""))
            if frame is not None and seen.fresh(frame):
                yield frame.event
        if len(rows) < HISTORY_PAGE:
            return
        after = "(" + fmt_id(parse_id(rows[-1][0]))


async def translate(state: Any, stored: StoredResponse) -> ResponseStream:
    """The response's translator, fed the whole event log as it stands."""
    stream = ResponseStream(stored.head, stored.policy)
    stream.start()
    async for ev in log_events(state.redis, stored.sid):
        stream.feed(ev)
    return stream


async def finalize(state: Any, stored: StoredResponse, stream: ResponseStream) -> None:
    """Keep an ended response's final object and conversation (no-op while it runs or once done)."""
    if not stream.ended or stored.final is not None:
        return
    info = await state.ops.sessions.get(stored.sid)
    msgs = await state.ops.sessions.messages(stored.sid)
    await store_of(state).finalize(stored, stream.snapshot(), msgs, info.owner if info else "")


async def current(state: Any, stored: StoredResponse) -> dict[str, Any]:
    """The Response object now (finalizing it if its session has ended)."""
    if stored.final is not None:
        return stored.final
    if await state.ops.sessions.get(stored.sid) is None:
        raise not_stored(stored.head.response_id)  # expired before anyone finalized it
    stream = await translate(state, stored)
    await finalize(state, stored, stream)
    return stream.snapshot()


async def finished(state: Any, response_id: str, key: str) -> StoredResponse | None:
    """The stored response with its conversation if it has ended (``conv`` None while it runs); None if absent."""
    try:
        stored = await owned(state, response_id, key)
        if stored.conv is None:
            await current(state, stored)
            stored = await owned(state, response_id, key)
    except ApiError:
        return None
    return stored
