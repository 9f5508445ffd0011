"""The tool catalog: the server tools that exist, as the tool workers publish them.

Only tool workers open MCP servers and HTTP tools.  Each one publishes, when it starts, the
specs of its started registry to ``ts:tools:specs`` (name -> JSON ``ToolInfo``: description,
JSON Schema, pool, idempotency, source, MCP server).  Parsers (which pool serves a call) and
gateways (which tools a session may use, with their schemas) read the catalog: cached for
``refresh_s``, re-read at once when a name is missing from a stale copy.

``split_tools`` sorts a session's requested tools into server tools (the catalog's own
schemas) and client tools (definitions of tools the server does not have; the client runs them).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

import msgspec
import redis.asyncio as aioredis

from schemas import keys

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class ToolInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a gateway or parser needs to know of one server tool."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = {}
    pool: str = "default"
    idempotent: bool = False
    source: str = "python"  # python | mcp | http
    server: str = ""  # the MCP server (its configured prefix) this tool belongs to

    def openai(self) -> dict[str, Any]:
        """This tool in the OpenAI ``tools`` format."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


_decoder = msgspec.json.Decoder(ToolInfo)


async def publish(r: aioredis.Redis, tools: Iterable[ToolInfo]) -> int:
    """Publish ``tools`` (a tool worker's started registry); returns how many."""
    mapping = {t.name: msgspec.json.encode(t) for t in tools}
    if mapping:
        await r.hset(keys.TOOL_SPECS, mapping=mapping)
    return len(mapping)


class ToolCatalog:
    """A cached read of the published catalog."""

    def __init__(self, r: aioredis.Redis, refresh_s: float = 2.0, miss_refresh_s: float = 0.2) -> None:
        """``refresh_s``: the cache's lifetime; ``miss_refresh_s``: a missing name re-reads a copy this old."""
        self.r, self.refresh_s, self.miss_refresh_s = r, refresh_s, miss_refresh_s
        self._tools: dict[str, ToolInfo] = {}
        self._read_at = float("-inf")

    async def tools(self, fresh: bool = False) -> dict[str, ToolInfo]:
        """Every published tool by name (re-read when older than ``refresh_s`` or ``fresh``)."""
        if fresh or time.monotonic() - self._read_at > self.refresh_s:
            raw = await self.r.hgetall(keys.TOOL_SPECS)
            self._tools = dict(sorted((k.decode(), _decoder.decode(v)) for k, v in raw.items()))
            self._read_at = time.monotonic()
        return self._tools

    async def get(self, name: str) -> ToolInfo | None:
        tools = await self.tools()
        if name not in tools and time.monotonic() - self._read_at >= self.miss_refresh_s:
            tools = await self.tools(fresh=True)  # a tool worker may have just published it
        return tools.get(name)

    async def pool_of(self, name: str) -> str:
        """The pool serving ``name``; unknown tools go to ``default``, whose worker reports them."""
        info = await self.get(name)
        return info.pool if info else "default"

    async def pools(self) -> set[str]:
        return {t.pool for t in (await self.tools()).values()}


class ToolRequestError(ValueError):
    """A session's requested tools are unusable (unknown server tool name, malformed tool dict)."""


class SessionTools(NamedTuple):
    tools: list[dict[str, Any]]  # every tool of the session, OpenAI format, for the prompt
    client_tools: list[str]  # names of those the client runs


def split_tools(catalog: dict[str, ToolInfo], requested: list[str | dict[str, Any]] | None) -> SessionTools:
    """The session's tools and which of them are client-side.

    ``None`` means every server tool.  A string names a server tool (unknown: an error).  A
    dict is an OpenAI tool (``{"type": "function", "function": {...}}`` or the bare function):
    the server's if the catalog has that name (its schema then replaces the client's), else
    the client's.
    """
    if requested is None:
        return SessionTools([t.openai() for t in catalog.values()], [])
    tools: list[dict[str, Any]] = []
    client: list[str] = []
    for item in requested:
        name = item if isinstance(item, str) else _tool_name(item)
        if name in catalog:
            tools.append(catalog[name].openai())
        elif isinstance(item, str):
            raise ToolRequestError(f"tools: unknown server tool {name!r}; known: {', '.join(catalog)}")
        else:
            tools.append(item if "function" in item else {"type": "function", "function": item})
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
