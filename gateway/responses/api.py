"""OpenAI Responses API: a translator over one session's event stream.

    POST   /v1/responses                       create (SSE with stream=true; background=true runs unattended)
    GET    /v1/responses/{id}                  the Response object; ?stream=true&starting_after=N replays
                                               every event after sequence number N once, then follows live
    DELETE /v1/responses/{id}                  forget a stored response (a running one is cancelled)
    POST   /v1/responses/{id}/cancel           cancel a running response
    GET    /v1/responses/{id}/input_items      its input items (after, limit, order)
    POST   /v1/responses/input_tokens          count a request's input tokens with the model's own template

A response is a session (``gateway.sessions.ops``): its id is ``resp_<sid>``.  Without server
tools it is a one-turn session whose calls all go back to the client (as a chat completion);
with server tools (``mcp`` tools) it is the server's loop (``SessionMode.RETURN_CALLS``): their
calls run on the tool workers, and a turn that calls a client tool ends it.  Its events are
translated by ``gateway.responses.format``; a stored one (``store``, the default) is kept by
``gateway.responses.store`` for ``response_ttl_s`` and belongs to the API key that made it
(others get 404).  A follow-up with ``previous_response_id`` is a new session
whose conversation is the stored one plus the new input, queued on the decoder that ran the
previous one (it may still hold the KV).  A non-background client that disconnects cancels
its response; a background one runs on, followed by this gateway.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from gateway.auth import Caller
from gateway.context import tokenizer_unavailable
from gateway.errors import ApiError
from gateway.responses.body import CreateResponse, ResponseInputs
from gateway.responses.format import ResponseStream
from gateway.responses.items import item_objects
from gateway.responses.output import ResponseHead
from gateway.responses.plan import Plan, build_prompt, plan
from gateway.responses.read import current, owned, store_of
from gateway.responses.run import open_run, sse
from gateway.runner import cancel_session, create_session
from gateway.sse import EventStreamResponse
from gateway.state import gateway_state
from gateway.strict_json import ParsedBodyRoute
from gateway.validation import check_model
from runtime.chat_template import PromptError
from runtime.routing import conversation_key
from runtime.session import SessionMode

router = APIRouter(tags=["responses"], route_class=ParsedBodyRoute)
_SSE = {200: {"content": {"text/event-stream": {}}, "description": "a Response object, or its events when streaming"}}


@router.post("/v1/responses", response_model=None, responses=_SSE)
async def create_response(body: CreateResponse, request: Request,
                          who: Caller) -> JSONResponse | EventStreamResponse:
    """Create a model response (streamed with ``stream: true``; unattended with ``background: true``)."""
    state = gateway_state(request)
    p = await plan(state, body, who.key_id)
    sid = await _session(state, p, who, body.max_output_tokens is not None)
    head = ResponseHead(sid, int(time.time()), p.echo)
    stored = None
    if body.store:
        stored = await store_of(state).create(sid, key=who.key_id, head=head, policy=p.prompt.policy,
                                              items=item_objects(p.items, sid), history=p.prompt.history,
                                              n_initial=len(p.prompt.messages), background=body.background)
    key = None if p.prompt.owner else conversation_key(p.prompt.messages, p.prompt.tools)
    await state.ops.start(sid, route_key=key, owner=p.prompt.owner)
    if body.background:
        (await open_run(state, sid, ResponseStream(head, p.prompt.policy), stored)).spawn()
    stream = ResponseStream(head, p.prompt.policy)
    if not body.stream and body.background:
        stream.start()
        return JSONResponse(stream.snapshot())
    run = await open_run(state, sid, stream, stored)
    if body.stream:
        return EventStreamResponse(sse(run, stream, stored, cancel=not body.background), abort=run.sub.ended)
    err = await run.collect(request)
    if err is not None:
        raise err
    return JSONResponse(stream.snapshot())


async def _session(state: Any, p: Plan, who: Any, max_tokens_sent: bool) -> str:
    """Create the response's session (not started yet): one turn whose calls all go back to the client, or,
    with server tools, the server's loop (until a turn without calls, a turn calling a client tool once its
    server calls have results, or ``max_turns``)."""
    prompt = p.prompt
    mode, max_turns = (SessionMode.RETURN_CALLS, state.cfg.max_turns) if p.server_tools else (SessionMode.ONESHOT, 1)
    try:
        return await create_session(state, who, prompt.messages, prompt.tools, client_tools=prompt.client_tools,
                                    params=p.params, max_tokens_sent=max_tokens_sent, meta=p.meta,
                                    max_turns=max_turns, mode=mode)
    except ApiError as err:  # the prompt cannot fit the context: name the field as this API calls it
        if err.param == "messages":
            err.param = "input"
        raise


@router.get("/v1/responses/{response_id}", response_model=None, responses=_SSE)
async def get_response(response_id: str, request: Request, who: Caller, stream: bool = False,
                       starting_after: int | None = Query(None, ge=-1)) -> Any:
    """A stored response; with ``stream=true`` its events after ``starting_after``, then live ones."""
    state = gateway_state(request)
    stored = await owned(state, response_id, who.key_id)
    if not stream:
        return await current(state, stored)
    if await state.ops.sessions.get(stored.sid) is None:
        raise ApiError(409, "the event log of this response has expired; retrieve it without stream=true",
                       param="stream", code="events_expired")
    stream = ResponseStream(stored.head, stored.policy, after=-1 if starting_after is None else starting_after)
    run = await open_run(state, stored.sid, stream, stored)
    return EventStreamResponse(sse(run, stream, stored, cancel=False), abort=run.sub.ended)


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request, who: Caller) -> dict[str, Any]:
    """Forget a stored response (a running one is cancelled first)."""
    state = gateway_state(request)
    stored = await owned(state, response_id, who.key_id)
    await cancel_session(state, stored.sid)
    await store_of(state).delete(stored.sid)
    return {"id": stored.head.response_id, "object": "response", "deleted": True}


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request, who: Caller) -> dict[str, Any]:
    """Cancel a running response; a cancelled one is returned as it is, a finished one is a 400."""
    state = gateway_state(request)
    stored = await owned(state, response_id, who.key_id)
    now = await current(state, stored)
    if now["status"] == "cancelled":
        return now
    if now["status"] not in ("in_progress", "queued"):
        raise ApiError(400, f"cannot cancel a response that is {now['status']}", code="response_not_cancellable")
    await cancel_session(state, stored.sid)
    return await current(state, await owned(state, response_id, who.key_id))


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(response_id: str, request: Request, who: Caller, after: str | None = Query(None),
                           limit: int = Query(20, ge=1, le=100),
                           order: Literal["asc", "desc"] = "desc") -> dict[str, Any]:
    """The response's input items, newest first unless ``order=asc``, paged by item id."""
    stored = await owned(gateway_state(request), response_id, who.key_id)
    items = stored.input if order == "asc" else stored.input[::-1]
    if after is not None:
        ids = [i["id"] for i in items]
        if after not in ids:
            raise ApiError(400, f"after: no input item {after[:64]!r} in this response", param="after",
                           code="invalid_value")
        items = items[ids.index(after) + 1:]
    page = items[:limit]
    return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit}


class CountTokens(ResponseInputs):
    """``POST /v1/responses/input_tokens``."""


@router.post("/v1/responses/input_tokens")
async def count_input_tokens(body: CountTokens, request: Request, who: Caller) -> dict[str, Any]:
    """How many tokens the request's input would take, rendered by the served model's own chat template."""
    state = gateway_state(request)
    if body.model is not None:
        check_model(state.cfg, body.model)
    prompt = await build_prompt(state, body, who.key_id)
    try:
        n = await state.context.count(prompt.messages, prompt.tools)
    except PromptError as exc:
        raise ApiError(400, str(exc), param="input", code="invalid_prompt") from None
    if n is None:
        raise tokenizer_unavailable("input_tokens")
    return {"object": "response.input_tokens", "input_tokens": n}
