"""Tools: the registry (``Registry.run`` never raises for tool problems), built-in tools,
MCP servers and HTTP endpoint tools, and their TOML configuration.

The arq worker shell (``worker.py``) and the dispatcher (``dispatch.py``) use this library;
nothing else here touches Redis.
"""

from workers.tools.builtin import default_registry
from workers.tools.config import open_registry
from workers.tools.registry import Registry
from workers.tools.render import format_registry
from workers.tools.spec import ErrorKind, ToolConfigError, ToolError, ToolOutcome, ToolSpec, ToolUnavailable, tool

__all__ = ["ErrorKind", "Registry", "ToolConfigError", "ToolError", "ToolOutcome", "ToolSpec", "ToolUnavailable",
           "default_registry", "format_registry", "open_registry", "tool"]

