"""Which server tools an ``{"type": "mcp", ...}`` tool of a Responses request selects.

This is the one place the Responses API learns what server tools exist: the tool catalog the
tool workers publish (``runtime.tool_catalog``, ``app.state.catalog``).

* ``server_label = "turnstream"``: the server's own tools (Python and HTTP tools);
* any other label ``L``: the tools of the configured MCP server ``L`` (published as ``L__<tool>``);
* ``allowed_tools`` (a list, or ``{"tool_names": [...]}``) narrows them by their name *on that
  server*; an unknown name is an error, as is an unknown label;
* ``server_url`` is refused: this server connects only to the MCP servers it is configured with
  (a caller never makes it open a connection it chose), named by ``server_label``.

The model sees and calls a tool by its catalog name (``ServerTool.info.name``); an ``mcp_call``
item reports ``server_label`` and the tool's own ``name``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import ApiError
from runtime.tool_catalog import ToolInfo

OWN_LABEL = "turnstream"
SEPARATOR = "__"  # an MCP server's tools are published as <server>__<tool>


@dataclass(frozen=True)
class ServerTool:
    info: ToolInfo  # the catalog's tool: what the model sees and calls
    label: str  # the server_label of the mcp tool that selected it
    name: str  # the tool's name on that server


def model_name(label: str, name: str) -> str:
    """The catalog name of tool ``name`` of server ``label``."""
    return name if label == OWN_LABEL else f"{label}{SEPARATOR}{name}"


async def select(state: Any, label: str, allowed: list[str] | None, server_url: str | None,
                 param: str) -> list[ServerTool]:
    """The server tools an mcp tool selects (400 naming ``param`` for an unknown label or tool, or a url)."""
    if server_url is not None:
        raise ApiError(400, f"{param}.server_url: this server connects only to the MCP servers it is configured "
                       "with; name one by server_label and leave server_url out", param=f"{param}.server_url",
                       code="invalid_value")
    catalog = await state.catalog.tools()
    available = _of_server(catalog.values(), label)
    if not available and label != OWN_LABEL:
        known = sorted({OWN_LABEL} | {t.server for t in catalog.values() if t.source == "mcp"})
        raise ApiError(400, f"{param}.server_label: no MCP server {label[:64]!r} is configured; known: "
                       f"{', '.join(known)}", param=f"{param}.server_label", code="unknown_mcp_server")
    names = sorted(available) if allowed is None else list(dict.fromkeys(allowed))
    unknown = [n for n in names if n not in available]
    if unknown:
        raise ApiError(400, f"{param}.allowed_tools: server {label[:64]!r} has no tool {unknown[0][:64]!r}",
                       param=f"{param}.allowed_tools", code="invalid_value")
    return [ServerTool(available[n], label, n) for n in names]


def _of_server(tools: Any, label: str) -> dict[str, ToolInfo]:
    """The catalog's tools of server ``label``, by their name there."""
    if label == OWN_LABEL:
        return {t.name: t for t in tools if t.source != "mcp"}
    prefix = label + SEPARATOR
    return {t.name[len(prefix):]: t for t in tools if t.source == "mcp" and t.server == label
            and t.name.startswith(prefix)}
