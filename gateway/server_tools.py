"""Which server tools an ``{"type": "mcp", ...}`` tool of a Responses request selects.

This is the one place the Responses API learns what server tools exist (today: the gateway's
tool registry, ``app.state.registry``, and the ``[mcp.*]`` sections of the tools file).

* ``server_label = "turnstream"``: the server's own tools (Python and HTTP tools of the registry);
* any other label ``L``: the tools of the configured MCP server ``L`` (registered as ``L__<tool>``);
* ``allowed_tools`` (a list, or ``{"tool_names": [...]}``) narrows them by their name *on that
  server*; an unknown name is an error, as is an unknown label;
* ``server_url`` is accepted only when it is the configured URL of server ``L``: a caller never
  makes this server open a connection it chose.

The model sees and calls a tool by its registry name (``ServerTool.model_name``); an
``mcp_call`` item reports ``server_label`` and the tool's own ``name``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from gateway.errors import ApiError
from workers.tools.mcp import SEPARATOR

OWN_LABEL = "turnstream"


@dataclass(frozen=True)
class ServerTool:
    model_name: str  # the registry's name: what the model sees and calls
    label: str  # the server_label of the mcp tool that selected it
    name: str  # the tool's name on that server


def model_name(label: str, name: str) -> str:
    """The registry name of tool ``name`` of server ``label``."""
    return name if label == OWN_LABEL else f"{label}{SEPARATOR}{name}"


def select(state: Any, label: str, allowed: list[str] | None, server_url: str | None, param: str) -> list[ServerTool]:
    """The server tools an mcp tool selects (400 naming ``param`` for an unknown label, tool or url)."""
    available = _available(state.registry, label)
    urls = _mcp_urls(state.cfg.tools_config or "")
    if label != OWN_LABEL and label not in urls and not available:
        raise ApiError(400, f"{param}.server_label: no MCP server {label[:64]!r} is configured; known: "
                       f"{', '.join([OWN_LABEL, *sorted(urls)])}", param=f"{param}.server_label",
                       code="unknown_mcp_server")
    if server_url is not None and (urls.get(label) or "").rstrip("/") != server_url.rstrip("/"):
        raise ApiError(400, f"{param}.server_url: {server_url[:100]!r} is not the configured URL of MCP server "
                       f"{label[:64]!r}; this server connects only to servers it is configured with",
                       param=f"{param}.server_url", code="invalid_value")
    if allowed is None:
        return [ServerTool(model_name(label, n), label, n) for n in sorted(available)]
    unknown = [n for n in allowed if n not in available]
    if unknown:
        raise ApiError(400, f"{param}.allowed_tools: server {label[:64]!r} has no tool {unknown[0][:64]!r}",
                       param=f"{param}.allowed_tools", code="invalid_value")
    return [ServerTool(model_name(label, n), label, n) for n in dict.fromkeys(allowed)]


def _available(registry: Any, label: str) -> set[str]:
    """Names (on server ``label``) of the registry's tools that belong to it."""
    out = set()
    for name in registry.names():
        source = registry.get(name).source
        if label == OWN_LABEL and source != "mcp":
            out.add(name)
        elif label != OWN_LABEL and source == "mcp" and name.startswith(label + SEPARATOR):
            out.add(name[len(label) + len(SEPARATOR):])
    return out


@functools.lru_cache(maxsize=8)
def _mcp_urls(tools_config: str) -> dict[str, str | None]:
    """Configured MCP servers: label -> URL (None for a stdio server)."""
    if not tools_config:
        return {}
    from workers.tools.config import load_config

    return {c.prefix: c.url for c in load_config(tools_config).mcp.values()}
