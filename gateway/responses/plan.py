"""A Responses request, validated against this deployment and mapped onto a session.

* the conversation: the stored conversation of ``previous_response_id`` (its owner's only; it
  must have finished) + the input items (``gateway.responses.items``); ``instructions`` go first
  as a system message and are not carried over to a follow-up, as OpenAI does;
* tools: ``function`` tools are client tools (their calls end the response), and so are the
  functions of a ``namespace`` tool (rendered by their own names, which must be unique; their
  calls carry ``namespace``); ``mcp`` tools select server tools (``gateway.responses.server_tools``) that
  run while the model generates; any other type is a 400 naming it;
* ``tool_choice`` as in chat completions (``gateway.openai.api``): ``none``, ``auto``, ``required``
  and a named function, held by the decoder's grammar (``workers.decode.constraints``); with
  server tools only ``auto`` and ``none`` (a forced call would force every turn of the loop);
* ``text.format``: ``text``, ``json_object`` or ``json_schema`` (the answer is held to the schema
  by the same grammar);
* fields that would change the result and are not implemented get a 400 naming them
  (``conversation``, ``prompt``, ``max_tool_calls``, ``top_logprobs``, ``truncation: "auto"``,
  other ``text.format`` types, ``text.verbosity``, ``reasoning.effort``, ``context_management``,
  ``include`` values other than those that change nothing here, and ``background`` without ``store``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway import tool_schemas
from gateway.errors import ApiError
from gateway.limits import check_counts
from gateway.responses.body import (CreateResponse, FunctionChoice, FunctionTool, McpAllowedFilter, McpTool,
                                    NamespaceTool, OtherChoice, ResponseInputs)
from gateway.responses.items import merge_system, normalize, to_messages
from gateway.responses.output import Policy
from gateway.responses.read import finished
from gateway.responses.server_tools import select
from gateway.validation import (DEFAULT_MAX_TOKENS, check_format_type, check_model, forced_tool, served_model,
                                unique_names, unsupported)

# include values that change nothing here: no such items exist, or reasoning is never encrypted
HARMLESS_INCLUDES = {"reasoning.encrypted_content", "file_search_call.results", "web_search_call.results",
                     "web_search_call.action.sources", "message.input_image.image_url",
                     "computer_call_output.output.image_url", "code_interpreter_call.outputs"}


@dataclass(frozen=True)
class Prompt:
    """What the model is shown: the conversation and the tools, and how its calls are treated."""

    history: list[dict[str, Any]]  # earlier conversation + input, without instructions
    messages: list[dict[str, Any]]  # what the session starts with: instructions + history
    tools: list[dict[str, Any]]  # rendered (chat-completions shape)
    client_tools: list[str]
    policy: Policy
    owner: str | None  # the decoder that ran the previous response (it may hold the KV)


@dataclass(frozen=True)
class Plan:
    prompt: Prompt
    items: list[Any]
    params: dict[str, Any]
    meta: dict[str, Any]
    echo: dict[str, Any]

    @property
    def server_tools(self) -> bool:
        return bool(self.prompt.policy.servers)


def check_supported(body: ResponseInputs) -> None:
    """400 naming the first field whose value would change the result and is not implemented."""
    if body.conversation is not None:
        raise unsupported("conversation", "the conversations API")
    if body.truncation == "auto":
        raise unsupported("truncation", '"auto"')
    fmt = _text_format(body)
    if fmt is not None:
        _check_format(fmt)
    if body.text and body.text.verbosity not in (None, "medium"):
        raise unsupported("text.verbosity", f"{body.text.verbosity[:20]!r}")
    if body.reasoning and body.reasoning.effort is not None:
        raise unsupported("reasoning.effort", f"{body.reasoning.effort[:20]!r} (reasoning is not steerable here)")
    if isinstance(body, CreateResponse):
        _check_create(body)


def _text_format(body: ResponseInputs) -> dict[str, Any] | None:
    """The request's ``text.format`` as sent (None when it sent none)."""
    return body.text.format.model_dump(exclude_none=True) if body.text and body.text.format else None


def _check_create(body: CreateResponse) -> None:
    for name in ("prompt", "max_tool_calls", "context_management"):
        if getattr(body, name) is not None:
            raise unsupported(name, name.replace("_", " "))
    if body.top_logprobs:
        raise unsupported("top_logprobs", "logprobs")
    bad = [v for v in body.include or [] if v not in HARMLESS_INCLUDES]
    if bad:
        raise unsupported("include", f"{bad[0][:60]!r}")
    if body.background and not body.store:
        raise ApiError(400, "background: a background response must be stored (store: true)", param="background",
                       code="invalid_value")


async def build_prompt(state: Any, body: ResponseInputs, key: str) -> Prompt:
    """The conversation, the tools and the output policy of a request."""
    check_supported(body)
    history, owner = await _previous(state, body.previous_response_id, key)
    history = history + to_messages(normalize(body.input))
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    tools = await _tools(state, body.tools or [])
    named = _tool_choice(body.tool_choice, tools.client, bool(tools.servers))
    offer = body.tool_choice != "none"
    rendered = [] if not offer else [t for t in tools.rendered if named is None or t["function"]["name"] == named]
    policy = Policy(tools.servers, offer, named, body.parallel_tool_calls is not False, tools.namespaces,
                    tuple(tools.client))
    if not history:
        raise ApiError(400, "input: the conversation is empty; give at least one input item", param="input",
                       code="invalid_value")
    return Prompt(history, merge_system(system + history), rendered, tools.client, policy, owner)


async def _previous(state: Any, response_id: str | None, key: str) -> tuple[list[dict[str, Any]], str | None]:
    """The stored conversation of the previous response and the decoder that ran it."""
    if response_id is None:
        return [], None
    stored = await finished(state, response_id, key)
    if stored is None:
        raise ApiError(404, f"previous response {response_id[:64]!r} not found", param="previous_response_id",
                       code="previous_response_not_found")
    if stored.conv is None:
        raise ApiError(400, f"previous response {response_id[:64]!r} has not finished", param="previous_response_id",
                       code="response_in_progress")
    return stored.conv, stored.owner or None


@dataclass
class _Tools:
    rendered: list[dict[str, Any]] = field(default_factory=list)
    client: list[str] = field(default_factory=list)
    servers: dict[str, tuple[str, str]] = field(default_factory=dict)  # model name -> (label, name there)
    namespaces: dict[str, str] = field(default_factory=dict)  # client tool -> its namespace

    def function(self, spec: FunctionTool, namespace: str = "") -> None:
        self.rendered.append(spec.as_chat())
        self.client.append(spec.name)
        if namespace:
            self.namespaces[spec.name] = namespace


async def _tools(state: Any, specs: list[Any]) -> _Tools:
    """The request's tools: client functions (namespaced ones flattened) and the server tools mcp tools select."""
    out = _Tools()
    for i, spec in enumerate(specs):
        if isinstance(spec, FunctionTool):
            out.function(spec)
        elif isinstance(spec, NamespaceTool):
            for j, inner in enumerate(spec.tools):
                if not isinstance(inner, FunctionTool):
                    raise unsupported(f"tools[{i}].tools[{j}].type", f"a tool of type {inner.type[:40]!r}")
                out.function(inner, spec.name)
        elif isinstance(spec, McpTool):
            for tool in await _mcp(state, spec, f"tools[{i}]"):
                if tool.info.name not in out.servers:
                    out.servers[tool.info.name] = (tool.label, tool.name)
                    out.rendered.append(tool.info.openai())
        else:
            raise unsupported(f"tools[{i}].type", f"a tool of type {spec.type[:40]!r}")
    names = [t["function"]["name"] for t in out.rendered]
    unique_names(names, "tool names (across namespaces and server tools)")
    return out


async def _mcp(state: Any, spec: McpTool, param: str) -> list[Any]:
    if spec.require_approval != "never":
        raise unsupported(f"{param}.require_approval", 'anything but "never" (approvals are not implemented)')
    for name in ("connector_id", "authorization", "headers"):
        if getattr(spec, name) is not None:
            raise unsupported(f"{param}.{name}", "a caller-supplied MCP connection setting")
    allowed = spec.allowed_tools
    if isinstance(allowed, McpAllowedFilter):
        if allowed.read_only is not None:
            raise unsupported(f"{param}.allowed_tools.read_only", "filtering by read_only")
        allowed = allowed.tool_names
    return await select(state, spec.server_label, allowed, spec.server_url, param)


def _check_format(fmt: dict[str, Any]) -> None:
    """``text.format``: text, json_object, or json_schema with a usable ``schema`` (400 otherwise)."""
    kind = fmt.get("type")
    check_format_type("text.format", kind)
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise ApiError(400, "text.format.schema: a JSON Schema object is required", param="text.format.schema",
                           code="invalid_value")
        try:
            tool_schemas.check(schema)
        except ValueError as exc:
            raise ApiError(400, f"text.format.schema: {exc}", param="text.format.schema",
                           code="invalid_value") from None


def _tool_choice(choice: Any, client: list[str], servers: bool) -> str | None:
    """The function named by ``tool_choice`` (None if not named); 400 on an impossible choice."""
    if isinstance(choice, OtherChoice):
        raise unsupported("tool_choice", f"type {choice.type[:40]!r}")
    name = choice.name if isinstance(choice, FunctionChoice) else None
    if (choice == "required" or name is not None) and servers:
        raise unsupported("tool_choice", "forcing a call together with mcp tools")
    return forced_tool(choice == "required", name, client)


async def plan(state: Any, body: CreateResponse, key: str) -> Plan:
    """Validate a create request and map it onto a session."""
    cfg = state.cfg
    check_model(cfg, body.model)
    prompt = await build_prompt(state, body, key)
    max_tokens = body.max_output_tokens or min(DEFAULT_MAX_TOKENS, cfg.max_tokens_limit)
    _check_limits(cfg, prompt, max_tokens)
    choice = body.tool_choice
    fmt = _text_format(body)
    params = {"max_tokens": max_tokens, "temperature": body.temperature, "top_p": body.top_p,
              # held by the decoder's grammar (workers.decode.constraints)
              "tool_choice": choice.model_dump() if isinstance(choice, FunctionChoice) else choice,
              "parallel_tool_calls": body.parallel_tool_calls,
              "text_format": fmt if fmt and fmt.get("type") != "text" else None}
    return Plan(prompt, normalize(body.input), {k: v for k, v in params.items() if v is not None},
                {"replay": body.replay} if body.replay else {}, _echo(cfg, body))


_FIELDS = {"messages": "input", "max_tokens": "max_output_tokens"}  # the limits' names in this API


def _check_limits(cfg: Any, prompt: Prompt, max_tokens: int) -> None:
    """The configured request limits (``gateway.limits``), naming this API's fields."""
    try:
        check_counts(cfg, messages=len(prompt.messages), tools=len(prompt.tools), max_tokens=max_tokens)
    except ApiError as err:
        field = _FIELDS.get(err.param or "", err.param)
        raise ApiError(err.status, f"{field}: {err.message.partition(': ')[2]}", param=field, code=err.code) from None


def _echo(cfg: Any, body: CreateResponse) -> dict[str, Any]:
    """The request fields a Response object repeats."""
    choice = body.tool_choice
    return {"model": served_model(cfg), "instructions": body.instructions,
            "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
            "tool_choice": choice.model_dump() if hasattr(choice, "model_dump") else (choice or "auto"),
            "parallel_tool_calls": body.parallel_tool_calls is not False, "temperature": body.temperature,
            "top_p": body.top_p, "max_output_tokens": body.max_output_tokens, "max_tool_calls": None,
            "previous_response_id": body.previous_response_id, "metadata": body.metadata or {}, "user": body.user,
            "store": body.store, "background": body.background, "service_tier": "default",
            "text": {"format": _text_format(body) or {"type": "text"}}, "truncation": "disabled",
            "reasoning": {"effort": None, "summary": body.reasoning.summary if body.reasoning else None}}
