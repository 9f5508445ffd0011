"""An Anthropic Messages request -> a oneshot session: the conversation in the internal,
OpenAI-shaped form the decoder renders with the model's chat template.

    system (string or text blocks)        {"role": "system", "content": text}
      and role "system" messages
    user text blocks                      {"role": "user", "content": text}   (blocks joined by "\\n")
    user tool_result blocks               {"role": "tool", "tool_call_id": tool_use_id, "content": text},
                                          before the message's text; is_error -> "error: " + text, as a
                                          failed server tool's result reads
    assistant text + tool_use blocks      {"role": "assistant", "content": text | None,
                                           "tool_calls": [{"id", "type": "function",
                                                           "function": {"name", "arguments": json}}]}
                                          (thinking blocks are not sent back to the model)
    tools                                 {"type": "function", "function": {"name", "description",
                                                                            "parameters": input_schema}}

``tool_choice``: ``none`` renders no tools; ``tool`` renders only that tool and forces the turn
to call it, ``any`` forces a call of one (where the deployment's format can be forced, see
``gateway.openai.api``); ``disable_parallel_tool_use`` returns only the first call.
``cache_control`` anywhere (top level, system, message blocks, tools) sets
``params["keep_kv_s"]``: how long the decoder keeps the conversation's KV pinned after the
turn (300 s for the default ``5m``, 3600 s for ``1h``; the longest wins; the decoder caps it).

Refused with a 400 that names the offending part: image, document and other non-text blocks
(the served models read text), server tools, a final assistant message (prefill), and a
``tool_choice`` that names no declared tool.  Count tokens and create share ``prompt`` so that
a count is what the decoder will see.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gateway.anthropic.bodies import (Block, CacheControl, CountTokensRequest, InputMessage, MessagesRequest,
                                      OtherBlock, TextBlock, ToolResultBlock, ToolUseBlock)
from gateway.openai.bodies import ToolDef
from gateway.limits import check_counts
from gateway.validation import check_model, invalid, unique_names
from runtime.config import Config

KEEP_KV_S = {"5m": 300, "1h": 3600}


@dataclass(frozen=True)
class Prompt:
    """What the decoder renders: the conversation and the tools offered."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]  # rendered into the prompt
    named: str | None  # the tool named by tool_choice
    offer_tools: bool  # False for tool_choice "none"


@dataclass(frozen=True)
class MessagesPlan:
    """A validated Messages request, as a oneshot session (``gateway.runner.Plan``)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    params: dict[str, Any]
    meta: dict[str, Any]
    named: str | None
    offer_tools: bool
    parallel: bool
    thinking: bool  # reasoning is streamed as thinking blocks


def prompt(cfg: Config, body: CountTokensRequest) -> Prompt:
    """Check the request against this deployment and map its conversation and tools (see the module doc)."""
    check_model(cfg, body.model)
    check_counts(cfg, messages=len(body.messages), tools=len(body.tools or []))
    tools = [_tool(i, t) for i, t in enumerate(body.tools or [])]
    names = [t["function"]["name"] for t in tools]
    unique_names(names)
    named = _named(body, names)
    offer = body.tool_choice is None or body.tool_choice.type != "none"
    rendered = [t for t in tools if named is None or t["function"]["name"] == named] if offer else []
    return Prompt(conversation(body), rendered, named, offer)


def plan_messages(cfg: Config, body: MessagesRequest) -> MessagesPlan:
    """Validate a Messages request and map it onto a oneshot session."""
    p = prompt(cfg, body)
    check_counts(cfg, max_tokens=body.max_tokens)
    choice = body.tool_choice
    params = {"max_tokens": body.max_tokens, "temperature": body.temperature, "top_p": body.top_p,
              "top_k": body.top_k, "stop": body.stop_sequences, "keep_kv_s": keep_kv_s(body),
              "tool_choice": choice.model_dump(exclude_none=True, include={"type", "name"}) if choice else None,
              "parallel_tool_calls": False if choice and choice.disable_parallel_tool_use else None}
    thinking = bool(cfg.reasoning) and body.thinking is not None and body.thinking.shown
    return MessagesPlan(p.messages, p.tools, {k: v for k, v in params.items() if v is not None},
                        {"replay": body.replay} if body.replay else {}, p.named, p.offer_tools,
                        not (choice and choice.disable_parallel_tool_use), thinking)


# --------------------------------------------------------------------------- tools
def _tool(i: int, tool: Any) -> dict[str, Any]:
    if tool.type not in (None, "custom"):
        raise invalid(f"tools.{i}.type", f"server tool {tool.type[:64]!r} is not supported by this server; "
                                         "declare client tools (name, description, input_schema)")
    if tool.input_schema is None:
        raise invalid(f"tools.{i}.input_schema", "Field required")
    fn = {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}
    try:
        return ToolDef.model_validate({"type": "function", "function": fn}).as_dict()
    except ValidationError as exc:
        raise invalid(f"tools.{i}.input_schema", exc.errors()[0].get("msg", "invalid")) from None


def _named(body: CountTokensRequest, names: list[str]) -> str | None:
    choice = body.tool_choice
    if choice is None or choice.type in ("auto", "none"):
        return None
    if not names:
        raise invalid("tool_choice", f"type {choice.type!r} is only allowed when tools are specified")
    if choice.type == "tool" and choice.name not in names:
        raise invalid("tool_choice.name", f"tool {str(choice.name)[:64]!r} is not in tools")
    return choice.name


# --------------------------------------------------------------------------- the conversation
def conversation(body: CountTokensRequest) -> list[dict[str, Any]]:
    """The request's system prompt and messages as internal messages."""
    if body.messages[-1].role == "assistant":
        raise invalid(f"messages.{len(body.messages) - 1}", "a final assistant message (prefill) is not "
                                                             "supported by this server; end with a user message")
    out = [{"role": "system", "content": _system_text(body.system)}] if body.system else []
    for i, m in enumerate(body.messages):
        out += _message(f"messages.{i}", m)
    return out


def _system_text(system: str | list[TextBlock]) -> str:
    return system if isinstance(system, str) else "\n".join(b.text for b in system)


def _message(where: str, m: InputMessage) -> list[dict[str, Any]]:
    blocks = _blocks(where, m.content)
    text = "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
    if m.role == "system":
        return [{"role": "system", "content": text}]
    if m.role == "assistant":
        calls = [_call(b) for b in blocks if isinstance(b, ToolUseBlock)]
        return [{"role": "assistant", "content": text or (None if calls else ""),
                 **({"tool_calls": calls} if calls else {})}]
    results = [_result(b) for b in blocks if isinstance(b, ToolResultBlock)]
    has_text = any(isinstance(b, TextBlock) for b in blocks) or not results
    return results + ([{"role": "user", "content": text}] if has_text else [])


def _blocks(where: str, content: str | list[Block]) -> list[Block]:
    """The message's blocks (a string is one text block); a 400 for a kind this server does not take."""
    if isinstance(content, str):
        return [TextBlock(type="text", text=content)]
    for j, b in enumerate(content):
        _refuse_other(f"{where}.content.{j}", b)
        if isinstance(b, ToolResultBlock) and not isinstance(b.content, str):
            for k, part in enumerate(b.content):
                _refuse_other(f"{where}.content.{j}.content.{k}", part)
    return list(content)


def _refuse_other(where: str, block: Any) -> None:
    if not isinstance(block, OtherBlock):
        return
    if block.type in ("image", "document"):
        raise invalid(where, f"{block.type} content is not supported: this deployment's model reads text only")
    raise invalid(where, f"content blocks of type {block.type[:64]!r} are not supported by this server")


def _call(b: ToolUseBlock) -> dict[str, Any]:
    return {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}


def _result(b: ToolResultBlock) -> dict[str, Any]:
    text = b.content if isinstance(b.content, str) else "\n".join(p.text for p in b.content
                                                                   if isinstance(p, TextBlock))
    return {"role": "tool", "tool_call_id": b.tool_use_id, "content": f"error: {text}" if b.is_error else text}


# --------------------------------------------------------------------------- cache_control
def keep_kv_s(body: CountTokensRequest) -> int | None:
    """Seconds to keep the conversation's KV after the turn: the longest ``cache_control`` TTL, if any."""
    marks = [c.ttl or "5m" for c in _cache_controls(body)]
    return max((KEEP_KV_S[t] for t in marks), default=None)


def _cache_controls(body: CountTokensRequest) -> list[CacheControl]:
    blocks: list[Any] = [body, *(body.tools or []), *(body.system if isinstance(body.system, list) else [])]
    for m in body.messages:
        if not isinstance(m.content, str):
            blocks += m.content
    return [c for b in blocks if (c := getattr(b, "cache_control", None)) is not None]
