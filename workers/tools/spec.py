"""What a tool is: ``ToolSpec`` (schema, handler, policy), the ``@tool`` decorator, ``ToolOutcome``,
and the exceptions a tool raises to fail with a message for the model."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
from typing import Any, Callable, Literal

import msgspec

from workers.tools.schema import function_schema

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
Source = Literal["python", "mcp", "http"]


class ErrorKind(enum.StrEnum):
    """Why an outcome is an error (``ToolOutcome.error_kind``)."""

    UNKNOWN_TOOL = "unknown_tool"
    INVALID_JSON = "invalid_json"
    INVALID_ARGUMENTS = "invalid_arguments"
    TIMEOUT = "timeout"
    TOOL_ERROR = "tool_error"  # the tool refused with a message meant for the model
    UNAVAILABLE = "unavailable"  # its backend (MCP server, HTTP endpoint) could not be reached
    EXCEPTION = "exception"  # an unexpected exception inside the tool
    INTERRUPTED = "interrupted"  # set by the worker: a non-idempotent call died mid-run, not re-run


class ToolError(Exception):
    """Raised by a tool to fail with a message addressed to the model (shown verbatim)."""


class ToolUnavailable(ToolError):
    """The tool's backend could not be reached; retried for idempotent tools."""


class ToolConfigError(ValueError):
    """A tool or tools file is misconfigured; the message names the key and the value."""


class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The result of one ``Registry.run``; ``content`` is what the model sees."""

    content: str
    is_error: bool = False
    duration_ms: float = 0.0
    error_kind: str | None = None  # an ErrorKind value when is_error
    truncated: bool = False
    attempts: int = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """One tool: its model-facing schema, its handler (called with keyword arguments) and policy."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[..., Any] = dataclasses.field(repr=False, compare=False)
    pool: str = "default"
    timeout_s: float = 30.0
    idempotent: bool = False
    retries: int = 0
    source: Source = "python"
    server: str = ""  # the MCP server (its configured prefix) this tool belongs to

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {NAME_RE.pattern}")
        if not NAME_RE.match(self.pool):
            raise ValueError(f"tool {self.name}: pool {self.pool!r} must match {NAME_RE.pattern}")
        if not self.timeout_s > 0:
            raise ValueError(f"tool {self.name}: timeout_s must be > 0, got {self.timeout_s!r}")
        if self.retries < 0 or (self.retries and not self.idempotent):
            raise ValueError(f"tool {self.name}: retries={self.retries!r} needs idempotent=True and >= 0")

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.handler)

    def openai(self) -> dict[str, Any]:
        """This tool in the OpenAI ``tools`` format."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


def tool(fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
         description: str | None = None, pool: str = "default", timeout_s: float = 30.0,
         idempotent: bool = False, retries: int = 0) -> Any:
    """Declare a Python function as a tool (``@tool`` or ``@tool(pool=..., ...)``).

    The function is returned unchanged, with its ``ToolSpec`` attached as ``__tool_spec__``.
    """
    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        f.__tool_spec__ = spec_from_function(  # type: ignore[attr-defined]
            f, name=name, description=description, pool=pool, timeout_s=timeout_s,
            idempotent=idempotent, retries=retries)
        return f
    return wrap(fn) if fn is not None else wrap


def spec_from_function(fn: Callable[..., Any], **overrides: Any) -> ToolSpec:
    """A ``ToolSpec`` for ``fn``; keyword overrides that are ``None`` are ignored."""
    summary, parameters = function_schema(fn)
    fields = {"name": fn.__name__, "description": summary, "parameters": parameters,
              "handler": fn, "source": "python"}
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return ToolSpec(**fields)


def spec_of(fn: Callable[..., Any]) -> ToolSpec:
    """The spec attached by ``@tool``, or one derived from the bare function."""
    return getattr(fn, "__tool_spec__", None) or spec_from_function(fn)
