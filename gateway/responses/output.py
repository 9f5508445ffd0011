"""The output items of one response as they are built (``OutputItem``), the Response object, and the
output ``Policy`` (which calls are the server's and which of the client's are returned).

An ``OutputItem`` is one entry of ``Response.output``: an assistant ``message`` (one
``output_text`` part), a ``reasoning`` item (one ``reasoning_text`` part), a ``function_call``
(a client tool: the caller runs it) or an ``mcp_call`` (a server tool, run here).  Its id is a
pure function of the session id and its output index, and a call's ``call_id`` of the session
id and the session's own call id (``call_<turn>_<index>``), so translating the same event log
twice gives the same ids.  Shapes follow ``openai.types.responses``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.responses.server_tools import OWN_LABEL
from gateway.translator import StreamedText

_ID_PREFIX = {"message": "msg", "reasoning": "rs", "function_call": "fc", "mcp_call": "mcp"}


def exposed_call_id(sid: str, call_id: str) -> str:
    """The ``call_id`` a client sees for the session's call ``call_<turn>_<index>`` (unique across responses)."""
    return f"call_{sid}_{call_id.removeprefix('call_')}"


@dataclass
class OutputItem:
    kind: str  # message | reasoning | function_call | mcp_call
    out: int  # output_index
    id: str
    name: str = ""  # calls: the function's name (mcp: its name on the server)
    call_id: str = ""  # function_call only
    label: str = ""  # mcp_call: server_label
    namespace: str = ""  # function_call of a tool in a namespace tool
    text: StreamedText = field(default_factory=StreamedText)  # message/reasoning text, or call arguments
    part_open: bool = False  # message/reasoning: content_part.added was sent
    args_done: bool = False  # calls: the arguments are complete
    done: bool = False  # output_item.done was sent
    status: str = "in_progress"
    output: str | None = None  # mcp_call result
    error: Any = None  # mcp_call error

    @classmethod
    def new(cls, kind: str, out: int, sid: str, **kw: Any) -> OutputItem:
        return cls(kind, out, f"{_ID_PREFIX[kind]}_{sid}_{out}", **kw)

    @property
    def is_text(self) -> bool:
        return self.kind in ("message", "reasoning")

    def part(self) -> dict[str, Any]:
        """The item's content part as it stands (message and reasoning items)."""
        if self.kind == "message":
            return {"type": "output_text", "text": self.text.sent, "annotations": []}
        return {"type": "reasoning_text", "text": self.text.sent}

    def obj(self) -> dict[str, Any]:
        """The item object as it stands."""
        match self.kind:
            case "message":
                return {"id": self.id, "type": "message", "role": "assistant", "status": self.status,
                        "content": [self.part()] if self.part_open else []}
            case "reasoning":
                return {"id": self.id, "type": "reasoning", "summary": [], "status": self.status,
                        "content": [self.part()] if self.part_open else []}
            case "function_call":
                return {"id": self.id, "type": "function_call", "call_id": self.call_id, "name": self.name,
                        "arguments": self.text.sent, "status": self.status,
                        **({"namespace": self.namespace} if self.namespace else {})}
        return {"id": self.id, "type": "mcp_call", "server_label": self.label, "name": self.name,
                "arguments": self.text.sent, "output": self.output, "error": self.error, "status": self.status}


@dataclass
class Usage:
    """Token counts of one turn (the last attempt's)."""

    prompt: int = 0
    cached: int = 0
    completion: int = 0


def usage_object(turns: list[Usage]) -> dict[str, Any]:
    """``ResponseUsage`` summed over the response's turns (every model call of a server-tool loop counts)."""
    prompt, cached, out = (sum(getattr(u, f) for u in turns) for f in ("prompt", "cached", "completion"))
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + out}


@dataclass(frozen=True)
class ResponseHead:
    """What a Response object repeats from its request, and its identity."""

    sid: str
    created_at: int
    echo: dict[str, Any]  # model, instructions, tools, tool_choice, temperature, ... as the request gave them

    @property
    def response_id(self) -> str:
        return f"resp_{self.sid}"

    def response(self, status: str, output: list[dict[str, Any]], *, usage: dict[str, Any] | None = None,
                 error: dict[str, Any] | None = None, incomplete: str | None = None,
                 completed_at: int | None = None) -> dict[str, Any]:
        """The ``Response`` object."""
        return {"id": self.response_id, "object": "response", "created_at": self.created_at, "status": status,
                "completed_at": completed_at, "error": error,
                "incomplete_details": {"reason": incomplete} if incomplete else None,
                **self.echo, "output": output, "usage": usage}


@dataclass(frozen=True)
class Policy:
    servers: dict[str, tuple[str, str]] = field(default_factory=dict)  # model name -> (server_label, name there)
    offer_tools: bool = True  # False for tool_choice "none"
    named: str | None = None  # the function named by tool_choice
    parallel: bool = True
    namespaces: dict[str, str] = field(default_factory=dict)  # client tool name -> its namespace tool
    clients: tuple[str, ...] = ()  # the client tools (with server tools, any other call is the server's)

    def server(self, name: str) -> tuple[str, str] | None:
        """(server_label, name there) of a call the server runs; None for a client call.  In a response with
        server tools a call of an unknown name is the server's too: it answers it with an error."""
        if name in self.servers:
            return self.servers[name]
        return (OWN_LABEL, name) if self.servers and name not in self.clients else None
