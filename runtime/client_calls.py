"""Client-side tool calls (OpenAI semantics): a tool the server does not have is run by the client.

The parser marks a call of a client tool pending in the turn's barrier (``c:{i}``) before the
client can see it, instead of enqueueing it; the client posts the result
(``submit_client_result``), which counts in the barrier exactly like a server-side result and
may complete the turn.  A call left without a result for ``client_tool_timeout_s`` is answered
with an error by the barrier sweep (``expire_overdue``), so the session goes on.

A result posted again -- a client retrying after a lost reply, even once the session has moved
on to later turns -- is a DUPLICATE, never an error: call ids name their turn
(``call_<turn>_<index>``), and the earlier turn's barrier still holds the first result.
"""

from __future__ import annotations

import time

from runtime.barrier import Arrival
from runtime.durations import Durations
from runtime.turns import Turns
from schemas.codec import encode
from schemas.events import Event, ToolResult


class ClientResultError(ValueError):
    """The posted result does not match a pending client-side call."""


def parse_call_id(call_id: str) -> tuple[int, int]:
    """(turn, index) of a call id ``call_<turn>_<index>``; ClientResultError for anything else."""
    parts = call_id.split("_")
    if len(parts) != 3 or parts[0] != "call" or not parts[1].isdigit() or not parts[2].isdigit():
        raise ClientResultError(f"{call_id[:80]!r} is not a call id of this session (call_<turn>_<index>)")
    return int(parts[1]), int(parts[2])


async def submit_client_result(turns: Turns, sid: str, call_id: str, content: str,
                               is_error: bool = False) -> Arrival:
    """Record the client's result for ``call_id``.

    Returns DUPLICATE when that call already has a result (of this or an earlier turn).
    Raises ClientResultError when the call is not a pending client-side call of the session's
    current turn.
    """
    info = await turns.sessions.get(sid)
    if info is None:
        raise ClientResultError(f"session {sid!r} does not exist")
    turn, index = parse_call_id(call_id)
    if turn < info.turn or not info.active:
        if await turns.barrier.has_result(sid, turn, index):
            return Arrival.DUPLICATE
        raise ClientResultError(f"call {call_id!r} is not waiting for a result (the session is at turn "
                                f"{info.turn}, {info.status})")
    if turn != info.turn:
        raise ClientResultError(f"call id {call_id!r} is not a call of turn {info.turn}")
    pending = await turns.barrier.client_call(sid, turn, index)
    if pending is None:
        raise ClientResultError(f"call {call_id!r} is not a pending client-side call of turn {turn}")
    return await record(turns, sid, turn, index, pending, content, is_error)


async def record(turns: Turns, sid: str, turn: int, index: int, pending: dict, content: str,
                 is_error: bool) -> Arrival:
    """Publish and record one client-side result; continue the session if it completes the turn."""
    ms = (time.time() - pending["t"]) * 1000
    result = {"index": index, "id": pending["id"], "name": pending["name"],
              "arguments": pending.get("arguments", "{}"), "content": content, "is_error": is_error,
              "duration_ms": ms, "client": True}
    ev = Event(sid=sid, turn=turn, attempt=0, seq=2 * index + 1, src="tools", ts=time.time(),
               body=ToolResult(index=index, id=pending["id"], name=pending["name"], content=content,
                               is_error=is_error, duration_ms=ms))
    arrival = await turns.barrier.result(sid, turn, index, result, encode(ev))
    if arrival != Arrival.DUPLICATE and not is_error:
        await Durations(turns.r).learn(pending["name"], ms)
    if arrival == Arrival.COMPLETED:
        await turns.complete(sid, turn)
    return arrival


async def expire_overdue(turns: Turns, sid: str, turn: int, timeout_s: float) -> int:
    """Answer client-side calls that waited longer than ``timeout_s`` with an error result."""
    return await expire_calls(turns, sid, turn, await turns.barrier.overdue_client_calls(sid, turn, timeout_s),
                              timeout_s)


async def expire_calls(turns: Turns, sid: str, turn: int, overdue: list[int], timeout_s: float) -> int:
    """Answer the ``overdue`` client-side calls (indices) of a turn with an error result."""
    n = 0
    for index in overdue:
        pending = await turns.barrier.client_call(sid, turn, index)
        if pending is not None:
            msg = f"error: the client did not return a result for {pending['name']} within {timeout_s:g} s"
            n += await record(turns, sid, turn, index, pending, msg, True) != Arrival.DUPLICATE
    return n
