"""MCP servers as tools, through the official ``mcp`` SDK (stdio or streamable HTTP).

Each configured server is one ``McpConnection``; its tools are registered as
``{prefix}__{tool}`` (a valid OpenAI function name).  The connection is opened lazily, kept
open, shared by concurrent calls, and discarded when it fails: that call becomes a
``ToolUnavailable`` outcome (retried only for idempotent tools) and the next call reconnects.

A connection is owned by one background task, because the SDK's transports are anyio
context managers that must be entered and exited in the same task::

    _hold task:  enter transport + Client -> publish client -> wait for stop -> exit (kills a stdio server)
    callers:     await client.call_tool(...) from any task
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import TYPE_CHECKING, Any

import msgspec

from workers.tools.registry import NAME_RE, Registry, ToolConfigError, ToolError, ToolSpec, ToolUnavailable

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult, Tool

log = logging.getLogger("turnstream.tools.mcp")

SEPARATOR = "__"
_INVALID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


class McpServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One MCP server: exactly one of ``command`` (stdio) or ``url`` (streamable HTTP)."""

    prefix: str
    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    pool: str = "default"
    timeout_s: float = 30.0
    connect_timeout_s: float = 20.0
    idempotent: bool | None = None  # None: trust each tool's idempotentHint / readOnlyHint
    retries: int = 1  # for the idempotent tools: one retry makes a reconnect seamless
    include: list[str] | None = None  # only these server tool names

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.prefix!r} needs exactly one of command or url")
        if not re.fullmatch(r"[a-zA-Z0-9-]+(_[a-zA-Z0-9-]+)*", self.prefix) or len(self.prefix) > 30:
            raise ValueError(f"prefix {self.prefix!r} must be 1-30 letters, digits, '-' or single '_'")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        if not (self.timeout_s > 0 and self.connect_timeout_s > 0):
            raise ValueError(f"timeouts must be > 0, got {self.timeout_s!r} and {self.connect_timeout_s!r}")
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries!r}")


class McpConnection:
    """A kept-open, self-healing client connection to one MCP server."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()

    async def list_tools(self) -> list[Tool]:
        """Every tool the server offers (all pages)."""
        client = await self._connected()
        tools, cursor = [], None
        while True:
            page = await self._guard(client, client.list_tools(cursor=cursor))
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call server tool ``name``; its text, or ``ToolError`` with its error text."""
        client = await self._connected()
        result = await self._guard(client, client.call_tool(name, arguments))
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or "the MCP server reported an error without a message")
        return text

    async def aclose(self) -> None:
        async with self._lock:
            await self._discard()

    async def _guard(self, client: Client, request: Any) -> Any:
        """Await ``request``; a transport failure discards the connection and becomes ``ToolUnavailable``."""
        import anyio
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        transport_errors = (OSError, EOFError, anyio.ClosedResourceError, anyio.BrokenResourceError,
                            anyio.EndOfStream)
        try:
            return await request
        except MCPError as e:
            if e.code != CONNECTION_CLOSED:
                raise ToolError(f"MCP error {e.code}: {e.message}") from None
            error: Exception = e
        except transport_errors as e:
            error = e
        await self._drop(client)
        raise ToolUnavailable(f"lost the connection to MCP server {self.config.prefix!r} ({error})")

    async def _connected(self) -> Client:
        async with self._lock:
            if self._client is not None and self._task is not None and not self._task.done():
                return self._client
            await self._discard()
            self._client = await self._open()
            return self._client

    async def _drop(self, client: Client) -> None:
        async with self._lock:
            if self._client is client:
                await self._discard()

    async def _open(self) -> Client:
        """Start the owner task and wait for its connection; caller holds the lock."""
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._hold(ready, self._stop), name=f"mcp:{self.config.prefix}")
        try:
            async with asyncio.timeout(self.config.connect_timeout_s):
                client = await asyncio.shield(ready)
        except Exception as e:  # spawn, handshake or timeout: whatever it was, the server is unreachable
            await self._discard()
            raise ToolUnavailable(f"cannot connect to MCP server {self.config.prefix!r}: "
                                  f"{type(e).__name__}: {e}") from None
        log.info("connected to MCP server %s", self.config.prefix)
        return client

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """The owner task: open the connection, publish it, keep it until ``stop``."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await stack.enter_async_context(self._new_client(stack))
                ready.set_result(client)
                await stop.wait()
        except Exception as e:  # the connection's boundary: report to the opener or log and end
            if not ready.done():
                ready.set_exception(e)
            else:
                log.warning("MCP server %s connection ended: %s", self.config.prefix, e)

    def _new_client(self, stack: contextlib.AsyncExitStack) -> Client:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        cfg = self.config
        if cfg.command is not None:
            params = StdioServerParameters(command=cfg.command, args=cfg.args, env=cfg.env or None, cwd=cfg.cwd)
            return Client(stdio_client(params))
        http = create_mcp_http_client(headers=cfg.headers or None)
        stack.push_async_callback(http.aclose)
        return Client(streamable_http_client(cfg.url or "", http_client=http))

    async def _discard(self) -> None:
        """Stop the owner task (closing the session and any stdio process); caller holds the lock."""
        task, client = self._task, self._client
        self._task = self._client = None
        self._stop.set()
        if task is None:
            return
        if client is None:  # still connecting: nothing to close gracefully
            task.cancel()
        _, pending = await asyncio.wait({task}, timeout=10)
        if pending:
            task.cancel()
            log.warning("MCP server %s did not close in time", self.config.prefix)


def result_text(result: CallToolResult) -> str:
    """The model-facing text of a tool result: text blocks, placeholders for media, else structured JSON."""
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        return msgspec.json.encode(result.structured_content).decode()
    return "\n".join(parts)


def _block_text(block: Any) -> str:
    match block.type:
        case "text":
            return block.text
        case "resource":
            text = getattr(block.resource, "text", None)
            return text if text is not None else f"[binary resource {block.resource.uri}]"
        case "resource_link":
            return f"[resource {block.uri}]"
        case kind:
            return f"[{kind}: {getattr(block, 'mime_type', 'unknown type')}]"


def tool_specs(connection: McpConnection, tools: list[Tool]) -> list[ToolSpec]:
    """Registry specs for the server's ``tools`` (filtered by ``include``), named ``prefix__tool``."""
    cfg = connection.config
    missing = sorted(set(cfg.include or ()) - {t.name for t in tools})
    if missing:
        log.warning("MCP server %s has no tools named %s (include)", cfg.prefix, ", ".join(missing))
    specs = []
    for t in tools:
        if cfg.include is not None and t.name not in cfg.include:
            continue
        name = cfg.prefix + SEPARATOR + _INVALID_CHARS.sub("_", t.name)
        if not NAME_RE.match(name):
            log.warning("MCP tool %s of %s skipped: name %r too long", t.name, cfg.prefix, name)
            continue
        specs.append(_spec(connection, t, name))
    return specs


def _spec(connection: McpConnection, t: Tool, name: str) -> ToolSpec:
    cfg = connection.config
    hints = t.annotations
    idempotent = cfg.idempotent
    if idempotent is None:
        idempotent = bool(hints and (hints.idempotent_hint or hints.read_only_hint))

    async def handler(**arguments: Any) -> str:
        return await connection.call(t.name, arguments)

    parameters = dict(t.input_schema or {})
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    return ToolSpec(name=name, description=t.description or t.title or f"{t.name} (MCP server {cfg.prefix})",
                    parameters=parameters, handler=handler, pool=cfg.pool, timeout_s=cfg.timeout_s,
                    idempotent=idempotent, retries=cfg.retries if idempotent else 0, source="mcp",
                    server=cfg.prefix)


def add_mcp_server(registry: Registry, config: McpServerConfig) -> McpConnection:
    """Attach an MCP server to ``registry``: its tools are listed and registered in ``registry.start()``."""
    connection = McpConnection(config)
    registry.add_resource(connection)

    async def register(reg: Registry) -> None:
        try:
            tools = await connection.list_tools()
        except ToolError as e:
            raise ToolConfigError(f"[mcp.{config.prefix}]: cannot list tools: {e}") from None
        for spec in tool_specs(connection, tools):
            reg.add(spec)
        log.info("MCP server %s: %d tools", config.prefix, len(tools))

    registry.add_starter(register)
    return connection
