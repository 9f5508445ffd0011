"""Session API (server-side agent loop), HTTP part; the event streams are in ``gateway.sessions.streams``.

    POST /v1/sessions                      create and start          -> 201 {id, status, ws_url, events_url}
    GET  /v1/sessions/{id}                 status, turn, conversation, last_event_id
    POST /v1/sessions/{id}/messages        continue with a user message (ended/cancelled) -> 202 {id, turn, after}
    POST /v1/sessions/{id}/tool_results    result(s) of client-side calls -> {results: [{tool_call_id, status}]}
    POST /v1/sessions/{id}/cancel          cancel the running turn (idempotent) -> {id, status}
    GET  /v1/tools                         the server tools a session may use
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.auth import Caller
from gateway.openai.bodies import AddMessage, CreateSession, NamedToolChoice, ToolDef, ToolResultIn, flatten
from gateway.errors import ApiError
from gateway.limits import check_counts
from gateway.sessions.ops import SessionOps
from gateway.state import gateway_state
from gateway.strict_json import ParsedBodyRoute
from gateway.validation import check_format_type, forced_tool
from runtime.routing import conversation_key
from runtime.session import SessionInfo, Status
from runtime.tool_catalog import ToolCatalog, ToolRequestError, split_tools

router = APIRouter(tags=["sessions"], route_class=ParsedBodyRoute)


def ops(request: Request) -> SessionOps:
    return gateway_state(request).ops


async def resolve_tools(catalog: ToolCatalog, requested: list[str | ToolDef] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """(tool definitions to render, names of client tools), by ``runtime.tool_catalog.split_tools``:
    names pick server tools; a definition of a tool the server does not have is a client tool."""
    items = None if requested is None else [t if isinstance(t, str) else t.as_dict() for t in requested]
    try:
        return tuple(split_tools(await catalog.tools(), items))
    except ToolRequestError as exc:
        raise ApiError(400, str(exc), param="tools", code="invalid_value") from exc


def _intent(body: CreateSession, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """``tool_choice`` and ``response_format`` as the decoder's grammar reads them (400 on a choice
    naming no tool of the session)."""
    choice = body.tool_choice
    named = isinstance(choice, NamedToolChoice)
    forced_tool(choice == "required", choice.function.name if named else None, {t["function"]["name"] for t in tools})
    choice = choice.model_dump() if named else choice
    fmt = body.response_format.model_dump(exclude_none=True) if body.response_format else None
    if fmt:
        check_format_type("response_format", fmt["type"])
    so = body.structured_outputs
    so = [x.as_dict() for x in so] if isinstance(so, list) else so.as_dict() if so else None
    return {k: v for k, v in {"tool_choice": choice, "response_format": fmt, "structured_outputs": so}.items()
            if v is not None}


def _openapi_links(status: int, *targets: str, after: bool = False) -> dict[int, dict[str, Any]]:
    """OpenAPI links from a response that names the session (``id``) to the operations on it
    (clients and stateful testers follow them: create -> continue, tool results, cancel, read)."""
    links = {t: {"operationId": t, "parameters": {"sid": "$response.body#/id"}} for t in targets}
    if after and "sessionEvents" in links:
        links["sessionEvents"]["parameters"]["after"] = "$response.body#/after"
    return {status: {"description": "the session", "links": links}}


def _links(sid: str, after: str = "0-0") -> dict[str, str]:
    q = "" if after == "0-0" else f"?after={after}"
    return {"ws_url": f"/v1/sessions/{sid}/ws{q}", "events_url": f"/v1/sessions/{sid}/events{q}"}


@router.post("/v1/sessions", status_code=201, operation_id="createSession",
             responses=_openapi_links(201, "readSession", "addMessage", "postToolResults", "cancelSession",
                                      "sessionEvents"))
async def create_session(body: CreateSession, request: Request, who: Caller) -> dict[str, Any]:
    """Create a session and queue its first turn; follow it on ``ws_url`` or ``events_url``."""
    state = gateway_state(request)
    cfg = state.cfg
    max_turns = body.max_turns or cfg.max_turns
    check_counts(cfg, messages=len(body.messages), tools=len(body.tools or []), max_turns=max_turns,
                 max_tokens=body.max_tokens)
    tools, client = await resolve_tools(state.catalog, body.tools)
    messages = [m.as_dict() for m in body.messages]
    await state.context.fits(messages, tools, max_tokens=body.max_tokens,
                             sent="max_tokens" in body.model_fields_set)
    params = {"max_tokens": body.max_tokens, "temperature": body.temperature, "top_p": body.top_p,
              "seed": body.seed, "stop": body.stop, **_intent(body, tools)}
    o = ops(request)
    sid = await o.create(who, messages, tools=tools, client_tools=client,
                         params=params, max_turns=max_turns, meta={"replay": body.replay} if body.replay else {})
    await o.start(sid, route_key=conversation_key(messages, tools))
    return {"id": sid, "object": "session", "status": Status.ACTIVE.value, **_links(sid)}


@router.get("/v1/sessions/{sid}", operation_id="readSession",
            responses=_openapi_links(200, "addMessage", "postToolResults", "cancelSession"))
async def read_session(sid: str, request: Request, who: Caller) -> dict[str, Any]:
    """The session's status, current turn, conversation so far and last event id."""
    return await ops(request).read(sid, who)


@router.post("/v1/sessions/{sid}/messages", status_code=202, operation_id="addMessage",
             responses=_openapi_links(202, "readSession", "postToolResults", "cancelSession", "sessionEvents",
                                      after=True))
async def add_message(sid: str, body: AddMessage, request: Request,
                      who: Caller) -> dict[str, Any]:
    """Continue an ended (or cancelled) session with a user message: a new turn starts.

    Subscribe with ``after`` (the event id before the new turn) to follow just the new turn.
    """
    check_counts(gateway_state(request).cfg, max_turns=body.max_turns)
    content = flatten(body.content) or ""
    info = await ops(request).continuable(sid, who)  # 409s first, whatever the message
    await _fits_after(request, sid, info, content)
    turn, after = await ops(request).add_message(sid, info, content, body.max_turns)
    return {"id": sid, "status": Status.ACTIVE.value, "turn": turn, "after": after, **_links(sid, after)}


async def _fits_after(request: Request, sid: str, info: SessionInfo, content: str) -> None:
    """400 when the stored conversation (complete: the session is not running a turn) and ``content``
    cannot fit the context."""
    messages = await ops(request).sessions.messages(sid) + [{"role": "user", "content": content}]
    await gateway_state(request).context.fits(messages, info.tools, max_tokens=int(info.params.get("max_tokens", 1)),
                                              sent=False)


@router.post("/v1/sessions/{sid}/tool_results", operation_id="postToolResults",
             responses=_openapi_links(200, "readSession", "cancelSession"))
async def post_tool_results(sid: str, body: ToolResultIn | list[ToolResultIn], request: Request,
                            who: Caller) -> dict[str, Any]:
    """Results of client-side tool calls (one object or a list): each is "recorded", "completed"
    (it was the turn's last missing result: the session continues) or "duplicate"."""
    items = body if isinstance(body, list) else [body]
    if not items:
        raise ApiError(400, "no tool results given", code="invalid_value")
    out = []
    for item in items:
        status = await ops(request).tool_result(sid, who, item.tool_call_id, item.text, item.is_error)
        out.append({"tool_call_id": item.tool_call_id, "status": status})
    return {"id": sid, "results": out}


@router.post("/v1/sessions/{sid}/cancel", operation_id="cancelSession",
             responses=_openapi_links(200, "readSession", "addMessage"))
async def cancel_session(sid: str, request: Request, who: Caller) -> dict[str, Any]:
    """Cancel the running turn; the session ends with reason "cancelled" (no-op when it already ended)."""
    return {"id": sid, "status": await ops(request).cancel(sid, who)}


@router.get("/v1/tools")
async def list_tools(request: Request, who: Caller) -> dict[str, Any]:
    """The server tools of this deployment, as OpenAI tool definitions."""
    return {"object": "list", "data": [t.openai() for t in (await gateway_state(request).catalog.tools()).values()]}
