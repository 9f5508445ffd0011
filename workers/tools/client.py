"""Client-side tools (OpenAI semantics): a tool the server does not have is run by the client.

At session creation ``split_tools`` sorts the requested tools: names and tool dicts the server
registry knows are server tools (with the registry's own schema), any other tool dict is a
client tool, listed in the session's ``client_tools``.  The parser marks a call of a client
tool pending in the turn's barrier (``c:{i}``) before the client can see it, instead of
enqueueing it; the client posts the result (``submit_client_result``), which counts in the
barrier exactly like a server-side result and may complete the turn.  A call left without a
result for ``client_tool_timeout_s`` is answered with an error by the decoders' sweep
(``expire_overdue``), so the session goes on.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any, NamedTuple

from schemas.codec import encode
from schemas.events import Event, ToolResult, call_id_prefix
from runtime.barrier import Arrival, Barrier, complete_turn
from runtime.session import Sessions
from workers.tools.durations import Durations
from workers.tools.registry import NAME_RE, Registry


class ClientResultError(ValueError):
    """The posted result does not match a pending client-side call."""


class ToolRequestError(ValueError):
    """A session's requested tools are unusable (unknown server tool name, malformed tool dict)."""


class SessionTools(NamedTuple):
    tools: list[dict[str, Any]]  # every tool of the session, OpenAI format, for the prompt
    client_tools: list[str]  # names of those the client runs


def split_tools(registry: Registry, requested: list[str | dict[str, Any]] | None,
                announced: Collection[str] = ()) -> SessionTools:
    """The session's tools and which of them are client-side.

    ``None`` means every server tool.  A string names a server tool (unknown: an error).  A
    dict is an OpenAI tool (``{"type": "function", "function": {...}}`` or the bare function):
    the server's if the registry has that name (its schema then replaces the client's) or the
    tool workers announced it (``announced``: the names in ``keys.TOOL_POOLS``, which include
    MCP tools a registry that was never started lacks), else the client's.
    """
    if requested is None:
        return SessionTools(registry.openai_tools(), [])
    tools: list[dict[str, Any]] = []
    client: list[str] = []
    for item in requested:
        name = item if isinstance(item, str) else _tool_name(item)
        if name in registry:
            tools += registry.openai_tools([name])
        elif isinstance(item, str):
            raise ToolRequestError(f"tools: unknown server tool {name!r}; known: {', '.join(registry.names())}")
        else:
            tools.append(item if "function" in item else {"type": "function", "function": item})
            if name not in announced:
                client.append(name)
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise ToolRequestError(f"tools: duplicate tool names in {names}")
    return SessionTools(tools, client)


def _tool_name(item: dict[str, Any]) -> str:
    fn = item.get("function", item)
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ToolRequestError(f"tools: a tool needs a name matching {NAME_RE.pattern}, got {name!r}")
    return name


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
    result = {"index": index, "id": pending["id"], "name": pending["name"],
              "arguments": pending.get("arguments", "{}"), "content": content, "is_error": is_error,
              "duration_ms": ms, "client": True}
    ev = Event(sid=sid, turn=turn, attempt=0, seq=2 * index + 1, src="tools", ts=time.time(),
               body=ToolResult(index=index, id=pending["id"], name=pending["name"], content=content,
                               is_error=is_error, duration_ms=ms))
    arrival = await barrier.result(sid, turn, index, result, encode(ev))
    if arrival != Arrival.DUPLICATE and not is_error:
        await Durations(barrier.r).learn(pending["name"], ms)
    if arrival == Arrival.COMPLETED:
        await complete_turn(barrier, sessions, sid, turn)
    return arrival


async def expire_overdue(barrier: Barrier, sessions: Sessions, sid: str, turn: int, timeout_s: float) -> int:
    """Answer client-side calls that waited longer than ``timeout_s`` with an error result."""
    n = 0
    for index in await barrier.overdue_client_calls(sid, turn, timeout_s):
        pending = await barrier.client_call(sid, turn, index)
        if pending is not None:
            msg = f"error: the client did not return a result for {pending['name']} within {timeout_s:g} s"
            n += await record(barrier, sessions, sid, turn, index, pending, msg, True) != Arrival.DUPLICATE
    return n
