"""Helpers for tests that drive the real stack: start a session as the gateway does, watch its events."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from schemas import keys
from schemas.codec import decode_event, encode
from schemas.events import StartTurn
from runtime import bus
from runtime.session import Sessions
from runtime.tool_catalog import ToolCatalog
from workers.parser import tools_called


async def server_tools(r: Any, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Every server tool, as a gateway sees them once the tool workers have published them."""
    catalog = ToolCatalog(r)
    async with asyncio.timeout(timeout_s):
        while not (tools := await catalog.tools(fresh=True)):
            await asyncio.sleep(0.05)
    return [t.openai() for t in tools.values()]


async def start_session(r: Any, sid: str, script: list[str], **kw: Any) -> None:
    """A session created as the gateway does (record + ``StartTurn``), with a ReplayEngine script;
    without ``tools``, it offers every server tool (the gateway's default) and any other tool its script
    calls (a client tool, or a name no worker has)."""
    if "tools" not in kw:
        served = await server_tools(r)
        names = {t["function"]["name"] for t in served}
        kw["tools"] = served + [t for t in tools_called(script) if t["function"]["name"] not in names]
    await Sessions(r).create(sid, [{"role": "user", "content": "go"}], meta={"replay": script}, **kw)
    await bus.add(r, keys.DECODE_JOBS, encode(StartTurn(sid=sid, turn=0)))


async def wait_for(r: Any, sid: str, pred: Callable[[list], bool], timeout_s: float = 30.0) -> list:
    """The event bodies of ``sid`` once ``pred(bodies)`` holds."""
    async with asyncio.timeout(timeout_s):
        while True:
            bodies = [decode_event(f[bus.FIELD]).body for _, f in await r.xrange(keys.events(sid))]
            if pred(bodies):
                return bodies
            await asyncio.sleep(0.05)


def of(bodies: list, kind: str) -> list:
    """The bodies of one type, by class name (``"ToolResult"``)."""
    return [b for b in bodies if type(b).__name__ == kind]


def ended(bodies: list) -> bool:
    return bool(of(bodies, "SessionEnded"))
