"""Anthropic Messages API: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

A Messages request is a oneshot session, as a chat completion is (``gateway.runner``): the
conversation (``gateway.anthropic.plan``) becomes a new one-turn session whose tools are all
client tools, and the session's events are translated into Anthropic's stream events or one
message (``gateway.anthropic.format``).  The decoder finds the KV of an earlier request of the
conversation by prefix, which is reported as ``usage.cache_read_input_tokens``.

Streamed responses are ``event: <type>`` / ``data: <json>`` pairs; while nothing happens a
``ping`` goes out every ``PING_S`` seconds; a failure after the response began is an
``error`` event in Anthropic's error shape.  Clients authenticate with ``x-api-key`` or
``Authorization: Bearer`` (``gateway.auth``); ``anthropic-version`` and ``anthropic-beta``
headers and query strings such as Claude Code's ``?beta=true`` are accepted and ignored.
Every error on these routes is in Anthropic's shape (``gateway.anthropic.errors``).

``count_tokens`` renders the conversation exactly as the decoder will (the served model's own
chat template, via ``runtime.chat_template``; the tokenizer is loaded once per process, on
first use) and counts its tokens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from gateway.anthropic.bodies import CountTokensRequest, MessagesRequest
from gateway.anthropic.format import MessageOptions, MessageStream
from gateway.anthropic.plan import plan_messages, prompt
from gateway.auth import Caller
from gateway.context import tokenizer_unavailable
from gateway.errors import ApiError
from gateway.runner import Run, failure, offered, open_session
from gateway.sse import EventStreamResponse, sse_typed
from gateway.state import gateway_state
from gateway.strict_json import ParsedBodyRoute
from gateway.translator import ToolPolicy
from runtime.chat_template import PromptError

router = APIRouter(tags=["anthropic"], route_class=ParsedBodyRoute)
PING_S = 10.0


@router.post("/v1/messages", response_model=None,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "a Message, or its stream events when stream=true"}})
async def create_message(body: MessagesRequest, request: Request, who: Caller) -> JSONResponse | EventStreamResponse:
    """Anthropic Messages (streamed and not); tool calls are returned as tool_use blocks."""
    state = gateway_state(request)
    plan = plan_messages(state.cfg, body)
    sid, sub = await open_session(state, who, plan)
    stream = MessageStream(MessageOptions(f"msg_{sid}", body.model, plan.thinking),
                           ToolPolicy(f"toolu_{sid}_", plan.offer_tools, plan.named, plan.parallel, offered(plan)))
    run = Run(state, sub, sid, stream)
    if body.stream:
        return EventStreamResponse(_events(run, request.url.path), abort=sub.ended)
    err = await run.collect(request)
    return err.response(request.url.path) if err else JSONResponse(stream.message())


def _events(run: Run, path: str) -> AsyncIterator[bytes]:
    return run.stream(sse_typed, lambda exc: sse_typed(failure(exc).body(path)), idle_s=PING_S,
                      idle=sse_typed({"type": "ping"}))


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request, who: Caller) -> dict[str, int]:
    """The prompt tokens a Messages request with this conversation, system prompt and tools would use."""
    state = gateway_state(request)
    p = prompt(state.cfg, body)
    try:
        n = await state.context.count(p.messages, p.tools)
    except PromptError as exc:
        raise ApiError(400, str(exc), code="invalid_value") from None
    if n is None:
        raise tokenizer_unavailable("count_tokens")
    return {"input_tokens": n}
