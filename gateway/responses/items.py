"""Responses input items <-> the session's conversation (chat messages), pure functions.

``to_messages`` maps a list of items onto the chat messages a session stores and the chat
template renders:

    message (user)                 -> {"role": "user", "content": text}
    message (system | developer)   -> {"role": "system", ...}
    message (assistant)            -> {"role": "assistant", "content": text}
    reasoning                      -> "reasoning_content" of the next assistant message
                                      (rendered where the template supports it)
    function_call / mcp_call       -> a tool call of the current assistant message: assistant
                                      messages and calls with nothing between them are one model
                                      turn, so they share one message (its text joined)
    function_call_output           -> {"role": "tool", "tool_call_id": call_id, "content": text}
    mcp_call (its output or error) -> that call's tool message
    mcp_list_tools                 -> nothing (the tools come from the request's tools)

Text parts (``input_text``, ``output_text``, ``refusal``) are joined; any other part (images,
files, audio) or item type is a 400 naming it (``input[3].content[0].type``).

``item_objects`` gives the input items as ``GET /v1/responses/{id}/input_items`` lists them:
OpenAI's item objects, each with an id (the client's, else a generated one).
"""

from __future__ import annotations

from typing import Any

from gateway.responses.body import (ContentPart, FunctionCallItem, FunctionCallOutputItem, McpCallItem, MessageItem,
                                    OtherItem, ReasoningItem)
from gateway.responses.server_tools import model_name
from gateway.validation import unsupported

_TEXT_PARTS = {"input_text", "output_text", "text", "refusal"}


def normalize(inp: str | list[Any]) -> list[Any]:
    """``input`` as a list of items (a string is one user message)."""
    return [MessageItem(role="user", content=inp)] if isinstance(inp, str) else list(inp)


def text_of(content: str | list[ContentPart], param: str) -> str:
    """Content as one string: text parts joined; 400 for any other part."""
    if isinstance(content, str):
        return content
    out = []
    for j, part in enumerate(content):
        if part.type not in _TEXT_PARTS:
            raise unsupported(f"{param}[{j}].type", f"content of type {part.type[:40]!r}")
        out.append(part.refusal if part.type == "refusal" else part.text or "")
    return "".join(out)


class _Builder:
    def __init__(self) -> None:
        self.msgs: list[dict[str, Any]] = []
        self.reasoning: list[str] = []
        self.names: dict[str, str] = {}  # call_id -> function name

    def assistant(self, content: str | None) -> dict[str, Any]:
        last = self.msgs[-1] if self.msgs else None
        if content is not None and last is not None and last["role"] == "assistant" and not self.reasoning:
            last["content"] = (last["content"] or "") + content  # one model turn: its text and calls
            return last
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if self.reasoning:
            msg["reasoning_content"], self.reasoning = "".join(self.reasoning), []
        self.msgs.append(msg)
        return msg

    def call(self, call_id: str, name: str, arguments: str) -> None:
        last = self.msgs[-1] if self.msgs else None
        if last is None or last["role"] != "assistant" or self.reasoning:
            last = self.assistant(None)
        last.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
        self.names[call_id] = name

    def result(self, call_id: str, content: str) -> None:
        msg = {"role": "tool", "tool_call_id": call_id, "content": content}
        if call_id in self.names:
            msg["name"] = self.names[call_id]
        self.msgs.append(msg)

    def add(self, item: Any, i: int) -> None:
        p = f"input[{i}]"
        match item:
            case MessageItem(role="assistant"):
                self.assistant(text_of(item.content, f"{p}.content"))
            case MessageItem():
                role = "user" if item.role == "user" else "system"
                self.msgs.append({"role": role, "content": text_of(item.content, f"{p}.content")})
            case ReasoningItem():
                self.reasoning += [part.text for part in item.content or item.summary]
            case FunctionCallItem():
                self.call(item.call_id, item.name, item.arguments)
            case FunctionCallOutputItem():
                self.result(item.call_id, text_of(item.output, f"{p}.output"))
            case McpCallItem():
                call_id = item.id or f"mcp_{i}"
                self.call(call_id, model_name(item.server_label, item.name), item.arguments)
                self.result(call_id, item.output if item.output is not None else f"error: {item.error}")
            case OtherItem(type="mcp_list_tools"):
                pass
            case OtherItem():
                raise unsupported(f"{p}.type", f"an input item of type {item.type[:40]!r}")


def to_messages(items: list[Any]) -> list[dict[str, Any]]:
    """The chat messages of ``items`` (see the module doc)."""
    b = _Builder()
    for i, item in enumerate(items):
        b.add(item, i)
    return b.msgs


def merge_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Leading system messages as one (templates render a single leading system message)."""
    n = 0
    while n < len(messages) and messages[n].get("role") == "system":
        n += 1
    if n < 2:
        return messages
    text = "\n\n".join(str(m.get("content") or "") for m in messages[:n])
    return [{"role": "system", "content": text}, *messages[n:]]


# --------------------------------------------------------------------------- stored input items
_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs",
           "mcp_call": "mcp", "mcp_list_tools": "mcpl"}


def item_objects(items: list[Any], sid: str) -> list[dict[str, Any]]:
    """The input items as OpenAI item objects, with ids."""
    return [_object(item, item.id or f"{_PREFIX.get(item.type, 'item')}_{sid}_in{i}")
            for i, item in enumerate(items)]


def _object(item: Any, item_id: str) -> dict[str, Any]:
    if isinstance(item, MessageItem):
        kind = "output_text" if item.role == "assistant" else "input_text"
        text = text_of(item.content, "input")
        part = {"type": kind, "text": text, **({"annotations": []} if kind == "output_text" else {})}
        return {"id": item_id, "type": "message", "role": item.role, "status": item.status or "completed",
                "content": [part]}
    out = item.model_dump(exclude_none=True)
    out["id"] = item_id
    if isinstance(item, FunctionCallOutputItem) and not isinstance(item.output, str):
        out["output"] = text_of(item.output, "input")
    if isinstance(item, (FunctionCallItem, FunctionCallOutputItem)):
        out.setdefault("status", "completed")
    return out
