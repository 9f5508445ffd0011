"""Client-side tools: the client runs the call and posts its result; it then counts in the
turn's barrier exactly like a server-side result (and may complete the turn)."""

from __future__ import annotations

import time

from schemas.codec import encode
from schemas.events import Event, ToolResult, call_id_prefix
from workers.barrier import Arrival, Barrier, complete_turn
from workers.session import Sessions


class ClientResultError(ValueError):
    """The posted result does not match a pending client-side call."""


def index_of(call_id: str, turn: int) -> int:
    """The call index inside a call id of ``turn`` (ids are ``call_<turn>_<index>``)."""
    prefix = call_id_prefix(turn)
    if not call_id.startswith(prefix) or not call_id[len(prefix):].isdigit():
        raise ClientResultError(f"call id {call_id!r} is not a call of turn {turn}")
    return int(call_id[len(prefix):])


async def submit_client_result(barrier: Barrier, sessions: Sessions, sid: str, call_id: str, content: str,
                               is_error: bool = False) -> Arrival:
    """Record the client's result for ``call_id`` of the session's current turn.

    Returns DUPLICATE when that call already has a result.  Raises ClientResultError when
    the session is not active or the call is not a pending client-side call.
    """
    info = await sessions.get(sid)
    if info is None or info.status != "active":
        raise ClientResultError(f"session {sid!r} is not active")
    index = index_of(call_id, info.turn)
    pending = await barrier.client_call(sid, info.turn, index)
    if pending is None:
        raise ClientResultError(f"call {call_id!r} is not a pending client-side call of turn {info.turn}")
    return await record(barrier, sessions, sid, info.turn, index, pending, content, is_error)


async def record(barrier: Barrier, sessions: Sessions, sid: str, turn: int, index: int, pending: dict,
                 content: str, is_error: bool) -> Arrival:
    """Publish and record one client-side result; continue the session if it completes the turn."""
    ms = (time.time() - pending["t"]) * 1000
    result = {"index": index, "id": pending["id"], "name": pending["name"], "content": content,
              "is_error": is_error, "duration_ms": ms, "client": True}
    ev = Event(sid=sid, turn=turn, attempt=0, seq=2 * index + 1, src="tools", ts=time.time(),
               body=ToolResult(index=index, id=pending["id"], name=pending["name"], content=content,
                               is_error=is_error, duration_ms=ms))
    arrival = await barrier.result(sid, turn, index, result, encode(ev))
    if arrival == Arrival.COMPLETED:
        await complete_turn(barrier, sessions, sid, turn)
    return arrival


async def expire_overdue(barrier: Barrier, sessions: Sessions, sid: str, turn: int, timeout_s: float) -> int:
    """Answer client-side calls that waited longer than ``timeout_s`` with an error result."""
    n = 0
    for index in await barrier.overdue_client_calls(sid, turn, timeout_s):
        pending = await barrier.client_call(sid, turn, index)
        if pending is not None:
            msg = f"error: the client did not return a result for {pending['name']} within {timeout_s:.0f} s"
            n += await record(barrier, sessions, sid, turn, index, pending, msg, True) != Arrival.DUPLICATE
    return n
