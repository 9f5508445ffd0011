"""OpenAI-compatible API: ``POST /v1/chat/completions`` and ``GET /v1/models``.

A chat completion is a oneshot session: the whole conversation (including earlier assistant
``tool_calls`` and ``role: "tool"`` results) becomes a new session whose tools are all
client tools; it runs one turn and the model's calls are returned to the client, never
executed here.  The decoder finds the KV of an earlier request by prefix, so a follow-up
request after tool results pays mostly for the new tokens.

``tool_choice``: ``"none"`` renders no tools; a named function renders only that function;
``"required"`` and ``"auto"`` render all.  The choice, ``response_format`` and
``parallel_tool_calls`` are recorded in the session's params; the decoder turns them into the
turn's grammar (``workers.decode.constraints``): calls name only offered tools, their arguments
follow the tools' schemas, ``required``/named turns are calls, a request without tools never
begins one.  The output is still filtered by the choice (``gateway.openai.format``).  A client
that disconnects mid-request cancels its session, which stops generation.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from gateway.auth import Caller
from gateway.openai.bodies import ChatRequest, NamedToolChoice
from gateway.errors import not_found
from gateway.limits import check_counts
from gateway.runner import Run, failure, offered, open_session
from gateway.openai.format import ChatOptions, ChatStream
from gateway.sse import EventStreamResponse, sse_json
from gateway.state import gateway_state
from gateway.strict_json import ParsedBodyRoute
from gateway.translator import ToolPolicy
from gateway.validation import (DEFAULT_MAX_TOKENS, accepted_models, check_format_type, check_model, forced_tool,
                                served_model, unique_names, unsupported)
from runtime.config import Config

router = APIRouter(tags=["openai"], route_class=ParsedBodyRoute)


def _model_entry(cfg: Config, created: int) -> dict[str, Any]:
    return {"id": served_model(cfg), "object": "model", "created": created, "owned_by": "turnstream"}


@router.get("/v1/models")
async def list_models(request: Request, who: Caller) -> dict[str, Any]:
    """The served model."""
    return {"object": "list", "data": [_model_entry(gateway_state(request).cfg, gateway_state(request).started)]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request, who: Caller) -> dict[str, Any]:
    cfg = gateway_state(request).cfg
    if model_id not in accepted_models(cfg):
        raise not_found(f"model {model_id[:80]!r}", "model_not_found")
    return _model_entry(cfg, gateway_state(request).started)


# --------------------------------------------------------------------------- request -> session
@dataclass(frozen=True)
class ChatPlan:
    """A validated chat request, as a oneshot session."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]  # rendered into the prompt
    params: dict[str, Any]
    meta: dict[str, Any]
    named: str | None
    offer_tools: bool


def plan_chat(cfg: Config, body: ChatRequest) -> ChatPlan:
    """Validate a chat request against this deployment and map it onto a oneshot session."""
    check_model(cfg, body.model)
    if (body.n or 1) != 1:
        raise unsupported("n", "more than one choice")
    if body.logprobs:
        raise unsupported("logprobs", "logprobs")
    if body.response_format:
        check_format_type("response_format", body.response_format.type)
    max_tokens = body.max_completion_tokens or body.max_tokens or min(DEFAULT_MAX_TOKENS, cfg.max_tokens_limit)
    check_counts(cfg, messages=len(body.messages), tools=len(body.tools or []), max_tokens=max_tokens,
                 tokens_param="max_completion_tokens" if body.max_completion_tokens else "max_tokens")
    tools = [t.as_dict() for t in body.tools or []]
    named = _check_tool_choice(body, [t["function"]["name"] for t in tools])
    offer = body.tool_choice != "none"
    rendered = [] if not offer else [t for t in tools if named is None or t["function"]["name"] == named]
    stop = [body.stop] if isinstance(body.stop, str) else body.stop
    choice = body.tool_choice.model_dump() if isinstance(body.tool_choice, NamedToolChoice) else body.tool_choice
    params = {"max_tokens": max_tokens, "temperature": body.temperature, "top_p": body.top_p, "seed": body.seed,
              "stop": stop, "tool_choice": choice, "parallel_tool_calls": body.parallel_tool_calls,
              "response_format": body.response_format.model_dump(exclude_none=True) if body.response_format else None,
              "structured_outputs": body.structured_outputs.as_dict() if body.structured_outputs else None}
    return ChatPlan([m.as_dict() for m in body.messages], rendered, {k: v for k, v in params.items() if v is not None},
                    {"replay": body.replay} if body.replay else {}, named, offer)


def _check_tool_choice(body: ChatRequest, names: list[str]) -> str | None:
    """The named function of ``tool_choice`` (None if not named); 400 on an impossible choice."""
    unique_names(names, "function names")
    choice = body.tool_choice
    return forced_tool(choice == "required", choice.function.name if isinstance(choice, NamedToolChoice) else None,
                       names)


# --------------------------------------------------------------------------- the endpoint
@router.post("/v1/chat/completions", response_model=None,
             responses={200: {"content": {"text/event-stream": {}}, "description": "a chat.completion object, "
                                                                                   "or chunks when stream=true"}})
async def chat_completions(body: ChatRequest, request: Request,
                           who: Caller) -> JSONResponse | EventStreamResponse:
    """OpenAI chat completion (streaming and not), tools returned to the client."""
    state = gateway_state(request)
    plan = plan_chat(state.cfg, body)
    sent = bool(body.max_completion_tokens or body.max_tokens)
    sid, sub = await open_session(state, who, plan, max_tokens_sent=sent)
    include_usage = bool(body.stream and body.stream_options and body.stream_options.include_usage)
    stream = ChatStream(ChatOptions(f"chatcmpl-{sid}", served_model(state.cfg), int(time.time()), include_usage),
                        ToolPolicy(f"call_{sid}_", plan.offer_tools, plan.named, body.parallel_tool_calls,
                                   offered(plan)))
    run = Run(state, sub, sid, stream)
    if body.stream:
        return EventStreamResponse(_chunks(run), abort=sub.ended)
    err = await run.collect(request)
    return err.response() if err else JSONResponse(stream.response())


def _chunks(run: Run) -> AsyncIterator[bytes]:
    """SSE body: ``data: <chunk>`` lines (an error object on failure), then ``data: [DONE]``."""
    return run.stream(sse_json, lambda exc: sse_json(failure(exc).body()), tail=b"data: [DONE]\n\n")
