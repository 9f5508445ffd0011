"""MCP servers as tools: a real server over stdio (and streamable HTTP), started by the test."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from mcp.types import CallToolResult, EmbeddedResource, ImageContent, TextContent, TextResourceContents

from workers.tools import ErrorKind, Registry
from workers.tools.mcp import McpConnection, McpServerConfig, add_mcp_server, result_text
from workers.tools.registry import NAME_RE, ToolConfigError, ToolUnavailable

from .conftest import MCP_SERVER
from .test_registry import assert_error


def stdio_config(**fields: Any) -> McpServerConfig:
    fields.setdefault("prefix", "demo")
    return McpServerConfig(command=sys.executable, args=[str(MCP_SERVER)], **fields)


async def started(*configs: McpServerConfig) -> Registry:
    reg = Registry(retry_delay_s=0.0)
    for config in configs:
        add_mcp_server(reg, config)
    await reg.start()
    return reg


async def test_stdio_round_trip() -> None:
    reg = await started(stdio_config(pool="mcp", timeout_s=5))
    try:
        assert reg.names() == ["demo__add", "demo__fail", "demo__nap", "demo__pid", "demo__shout"]
        assert all(NAME_RE.match(t["function"]["name"]) for t in reg.openai_tools())
        add = reg.get("demo__add")
        assert add is not None and (add.source, add.pool, add.description) == ("mcp", "mcp", "Add two integers.")
        assert add.parameters["required"] == ["a", "b"]
        assert add.idempotent and not reg.get("demo__shout").idempotent  # type: ignore[union-attr]

        assert (await reg.run("demo__add", '{"a": 2, "b": 40}')).content == "42"
        assert (await reg.run("demo__shout", '{"text": "hi"}')).content == "HI"
        assert_error(await reg.run("demo__fail", '{"message": "boom"}'), ErrorKind.TOOL_ERROR, "demo__fail:")
        assert_error(await reg.run("demo__add", '{"a": "two", "b": 1}'), ErrorKind.INVALID_ARGUMENTS,
                     "'two' is not of type 'integer'")
    finally:
        await reg.aclose()


async def test_timeouts_and_concurrent_calls_share_one_connection() -> None:
    reg = await started(stdio_config(timeout_s=1.0))
    try:
        assert_error(await reg.run("demo__nap", '{"seconds": 10}'), ErrorKind.TIMEOUT, "after 1 s")
        assert (await reg.run("demo__add", '{"a": 1, "b": 1}')).content == "2"  # still usable
        pids = {(await reg.run("demo__pid", "{}")).content for _ in range(3)}
        assert len(pids) == 1
        start = time.perf_counter()
        outs = await asyncio.gather(*[reg.run("demo__nap", '{"seconds": 0.5}') for _ in range(10)])
        assert [o.content for o in outs] == ["slept 0.5"] * 10
        assert time.perf_counter() - start < 3.0  # together ~0.5 s; one at a time: 5 s
    finally:
        await reg.aclose()


async def test_dead_server_is_an_error_outcome_then_reconnects() -> None:
    reg = await started(stdio_config())
    try:
        pid = int((await reg.run("demo__pid", "{}")).content)
        os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.3)
        out = await reg.run("demo__shout", '{"text": "x"}')  # not idempotent: reported, not retried
        assert_error(out, ErrorKind.UNAVAILABLE, "lost the connection to MCP server 'demo'")
        assert (await reg.run("demo__shout", '{"text": "back"}')).content == "BACK"
        new_pid = int((await reg.run("demo__pid", "{}")).content)
        assert new_pid != pid

        os.kill(new_pid, signal.SIGKILL)
        await asyncio.sleep(0.3)
        retried = await reg.run("demo__add", '{"a": 1, "b": 2}')  # read-only hint: idempotent
        assert retried.content == "3" and retried.attempts == 2
        last_pid = int((await reg.run("demo__pid", "{}")).content)
    finally:
        await reg.aclose()
    with pytest.raises(ProcessLookupError):  # closing the registry ends (and reaps) the server
        os.kill(last_pid, 0)


async def test_config_policy_include_and_idempotent_override() -> None:
    reg = await started(stdio_config(prefix="calc", include=["add", "shout"], idempotent=True, retries=3))
    try:
        assert reg.names() == ["calc__add", "calc__shout"]
        assert all(reg.get(n).retries == 3 for n in reg.names())  # type: ignore[union-attr]
    finally:
        await reg.aclose()


async def test_server_that_cannot_start() -> None:
    broken = McpServerConfig(prefix="gone", command=sys.executable, args=["-c", "import sys; sys.exit(3)"],
                             connect_timeout_s=5)
    reg = Registry()
    add_mcp_server(reg, broken)
    with pytest.raises(ToolConfigError, match=r"\[mcp.gone\]: cannot list tools: cannot connect"):
        await reg.start()
    await reg.aclose()
    with pytest.raises(ToolUnavailable, match="cannot connect to MCP server 'gone'"):
        await McpConnection(broken).call("add", {})


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="exactly one of command or url"):
        McpServerConfig(prefix="x")
    with pytest.raises(ValueError, match="exactly one of command or url"):
        McpServerConfig(prefix="x", command="a", url="http://h/mcp")
    with pytest.raises(ValueError, match="prefix 'a__b'"):
        McpServerConfig(prefix="a__b", command="a")
    with pytest.raises(ValueError, match="must start with http"):
        McpServerConfig(prefix="x", url="ws://h/mcp")


def test_result_text_of_non_text_blocks() -> None:
    result = CallToolResult(content=[
        TextContent(text="hello"), ImageContent(data="aGk=", mime_type="image/png"),
        EmbeddedResource(resource=TextResourceContents(uri="file:///a.txt", text="file body")),
    ])
    assert result_text(result) == "hello\n[image: image/png]\nfile body"
    assert result_text(CallToolResult(content=[], structured_content={"n": 1})) == '{"n":1}'


# --------------------------------------------------------------------------- streamable HTTP
@pytest.fixture
def http_mcp_server() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(MCP_SERVER), "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("the MCP HTTP server did not start")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_streamable_http_round_trip(http_mcp_server: str) -> None:
    reg = await started(McpServerConfig(prefix="remote", url=http_mcp_server, headers={"X-Test": "1"}))
    try:
        assert "remote__add" in reg.names()
        assert (await reg.run("remote__add", '{"a": 20, "b": 22}')).content == "42"
        out = await reg.run("remote__fail", '{"message": "x"}')
        assert out.is_error and out.error_kind == "tool_error"
        assert json.loads((await reg.run("remote__pid", "{}")).content) > 0
    finally:
        await reg.aclose()
