"""What clients send to ``/v1/responses``: the request body and its input items and tools (pydantic).

Shapes follow ``openai.types.responses`` (``ResponseCreateParams``, ``ResponseInputItemParam``,
``FunctionToolParam``, ``tool_param.Mcp``).  Static shape rules live here; whether a field is
*supported* by this server is decided by ``gateway.responses.plan``, which answers 400 naming
the field for anything that would change the result and is not implemented.  Input items and
tools of a type this server does not know are parsed as ``OtherItem`` / ``OtherTool`` so that
the plan can say which one, instead of a generic union error.  Fields OpenAI defines that do
not change the result (``prompt_cache_key``, ``safety_identifier``, ``service_tier``,
``stream_options``, ...) and unknown fields are ignored.  ``replay`` is the test/benchmark
extension read only by the ReplayEngine (``gateway.openai.bodies``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from gateway.openai.bodies import NAME_PATTERN, FunctionDef, Replay, _check_replay
from gateway.validation import type_tag


# --------------------------------------------------------------------------- input items
class ContentPart(BaseModel):
    """A text part (``input_text``, ``output_text``, ``refusal``); other types are refused by the plan."""

    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None
    refusal: str | None = None


Content = str | list[ContentPart]


class MessageItem(BaseModel):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Content
    id: str | None = None
    status: str | None = None
    phase: str | None = None


class FunctionCallItem(BaseModel):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=128)
    arguments: str
    id: str | None = None
    status: str | None = None
    namespace: str | None = None


class FunctionCallOutputItem(BaseModel):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1, max_length=256)
    output: Content
    id: str | None = None
    status: str | None = None


class ReasoningPart(BaseModel):
    type: str
    text: str


class ReasoningItem(BaseModel):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[ReasoningPart] = Field(default_factory=list)
    content: list[ReasoningPart] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class McpCallItem(BaseModel):
    """A server-tool call of an earlier response, sent back in a stateless follow-up."""

    type: Literal["mcp_call"]
    id: str | None = None
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: Any = None
    status: str | None = None


class OtherItem(BaseModel):
    """An input item of a type this server does not take (the plan answers 400 naming it)."""

    model_config = ConfigDict(extra="allow")
    type: str


_ITEM_TAGS = {"message", "function_call", "function_call_output", "reasoning", "mcp_call", "mcp_list_tools"}


def _item_tag(v: Any) -> str:
    return type_tag(v, _ITEM_TAGS, missing="message")


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")] | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[McpCallItem, Tag("mcp_call")] | Annotated[OtherItem, Tag("mcp_list_tools")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_item_tag)]
"""One input item, by ``type`` (a message may omit it)."""


# --------------------------------------------------------------------------- tools
class FunctionTool(FunctionDef):
    """A client tool: the response ends with its ``function_call`` items."""

    type: Literal["function"]

    def as_chat(self) -> dict[str, Any]:
        """The chat-completions shape the chat template and the session record use."""
        return {"type": "function", "function": self.model_dump(exclude_none=True, exclude={"type"})}


class McpAllowedFilter(BaseModel):
    tool_names: list[str] | None = None
    read_only: bool | None = None


class McpTool(BaseModel):
    """Server tools (``gateway.responses.server_tools``): ``server_label`` "turnstream" is the server's own tools, any
    other label a configured MCP server of that name."""

    model_config = ConfigDict(extra="allow")
    type: Literal["mcp"]
    server_label: str = Field(min_length=1, max_length=64)
    allowed_tools: list[str] | McpAllowedFilter | None = None
    require_approval: Literal["always", "never"] | dict[str, Any] | None = None
    server_url: str | None = None
    server_description: str | None = None
    connector_id: str | None = None
    authorization: str | None = None
    headers: dict[str, str] | None = None


class OtherTool(BaseModel):
    """A tool type this server does not run (web search, code interpreter, ...: the plan answers 400)."""

    model_config = ConfigDict(extra="allow")
    type: str


def _tool_tag(v: Any) -> str:
    return type_tag(v, ("function", "mcp", "namespace"))


class NamespaceTool(BaseModel):
    """A named group of function tools (as Codex sends them): each is a client tool; its calls carry ``namespace``."""

    type: Literal["namespace"]
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    tools: list[Annotated[Annotated[FunctionTool, Tag("function")] | Annotated[OtherTool, Tag("other")],
                          Discriminator(lambda v: "function" if _tool_tag(v) == "function" else "other")]]


ToolSpec = Annotated[Annotated[FunctionTool, Tag("function")] | Annotated[McpTool, Tag("mcp")]
                     | Annotated[NamespaceTool, Tag("namespace")] | Annotated[OtherTool, Tag("other")],
                     Discriminator(_tool_tag)]


class FunctionChoice(BaseModel):
    type: Literal["function"]
    name: str = Field(pattern=NAME_PATTERN)


class OtherChoice(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str


ToolChoice = Literal["none", "auto", "required"] | FunctionChoice | OtherChoice


# --------------------------------------------------------------------------- the request
class TextFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = "text"


class TextConfig(BaseModel):
    format: TextFormat | None = None
    verbosity: str | None = None


class ReasoningConfig(BaseModel):
    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


class ResponseInputs(BaseModel):
    """What both ``POST /v1/responses`` and ``POST /v1/responses/input_tokens`` take: the prompt's parts."""

    model: str | None = None
    input: str | list[InputItem] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = Field(default=None, max_length=128)
    conversation: Any = None
    reasoning: ReasoningConfig | None = None
    text: TextConfig | None = None
    truncation: Literal["auto", "disabled"] | None = None


class CreateResponse(ResponseInputs):
    """``POST /v1/responses``."""

    model: str
    stream: bool = False
    background: bool = False
    store: bool = True
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    metadata: dict[str, str] | None = None
    user: str | None = Field(default=None, max_length=512)
    include: list[str] | None = None
    max_tool_calls: int | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    prompt: Any = None
    context_management: Any = None
    replay: Replay = None

    _replay = field_validator("replay")(_check_replay)

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is not None and (len(v) > 16 or any(len(k) > 64 or len(x) > 512 for k, x in v.items())):
            raise ValueError("at most 16 pairs, keys up to 64 characters, values up to 512")
        return v
