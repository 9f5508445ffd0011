"""What clients send: the request bodies of the session API and the OpenAI API (pydantic).

Static shape rules live here; limits that come from configuration (counts, max_turns,
max_tokens) are checked by ``gateway.limits.check_counts``.  Unknown fields are ignored, as
OpenAI-compatible servers do.  ``replay`` is a test/benchmark extension read only by the
ReplayEngine; it is validated but left out of the OpenAPI schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import jinja2
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from gateway import tool_schemas

NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
_jinja = jinja2.Environment(autoescape=False)


# --------------------------------------------------------------------------- shared parts
class TextPart(BaseModel):
    type: Literal["text"]
    text: str


Content = str | list[TextPart] | None


def flatten(content: Content) -> str | None:
    """Message content as one string (text parts concatenated)."""
    if content is None or isinstance(content, str):
        return content
    return "".join(p.text for p in content)


def _check_schema(v: dict[str, Any] | None) -> dict[str, Any] | None:
    if v is not None:
        tool_schemas.check(v)
    return v


class FunctionDef(BaseModel):
    """A function; without ``parameters`` it takes no arguments (``gateway.tool_schemas``)."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    _schema = field_validator("parameters")(_check_schema)


class ToolDef(BaseModel):
    """An OpenAI function tool definition."""

    type: Literal["function"]
    function: FunctionDef

    def as_dict(self) -> dict[str, Any]:
        """The definition as stored and rendered: ``parameters`` always written out."""
        out = self.model_dump(exclude_none=True)
        out["function"]["parameters"] = tool_schemas.normalise(self.function.parameters)
        return out


class FunctionCall(BaseModel):
    name: str
    arguments: str


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


def _check_replay(v: list[str] | None) -> list[str] | None:
    for i, template in enumerate(v or []):
        try:
            _jinja.parse(template)
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(f"replay[{i}]: invalid template: {exc.message}") from None
    return v


Replay = SkipJsonSchema[list[Annotated[str, Field(max_length=100_000)]] | None]


class _Message(BaseModel):
    content: Content = None
    name: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The message as stored in the session's conversation."""
        out: dict[str, Any] = {"role": self.role, "content": flatten(self.content)}
        if self.name:
            out["name"] = self.name
        return out


class SystemMessage(_Message):
    role: Literal["system", "developer"]

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "role": "system"}  # developer is read as system


class UserMessage(_Message):
    role: Literal["user"]


class AssistantMessage(_Message):
    role: Literal["assistant"]
    tool_calls: list[ToolCall] | None = None

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        if self.tool_calls:
            out["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        return out


class ToolMessage(_Message):
    role: Literal["tool"]
    tool_call_id: str

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "tool_call_id": self.tool_call_id}


Message = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]
"""One conversation message, OpenAI's shape, by role (``developer`` is read as ``system``)."""


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(BaseModel):
    name: str = "response"
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None

    _schema = field_validator("schema_")(_check_schema)


class StructuredOutputs(BaseModel):
    """vLLM's ``structured_outputs`` extension: the turn's whole text held to a grammar the client wrote
    (``grammar``: Lark in llguidance's dialect, ``<[id]>`` for a token id; or ``regex``).  It replaces the
    grammar turnstream builds from ``tool_choice``/``response_format``; the parser still reads the text."""

    model_config = ConfigDict(extra="forbid")

    grammar: str | None = Field(default=None, max_length=1_000_000)
    regex: str | None = Field(default=None, max_length=100_000)

    @model_validator(mode="after")
    def _one(self) -> "StructuredOutputs":
        if (self.grammar is None) == (self.regex is None):
            raise ValueError("give exactly one of grammar, regex")
        return self

    def as_dict(self) -> dict[str, str]:
        return self.model_dump(exclude_none=True)


class ResponseFormat(BaseModel):
    """``text``, ``json_object`` or ``json_schema`` (the answer is held to the schema by the decoder's grammar)."""

    type: str
    json_schema: JsonSchemaFormat | None = None

    def model_dump(self, **kw: Any) -> dict[str, Any]:
        return super().model_dump(by_alias=True, **kw)


def _examples(*bodies: dict[str, Any]) -> ConfigDict:
    """Documented request examples (the API docs show them; the property suite mutates them)."""
    return ConfigDict(json_schema_extra={"examples": list(bodies)})


_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
_ASK = {"role": "user", "content": "What's the weather in Paris?"}


# --------------------------------------------------------------------------- session API
class CreateSession(BaseModel):
    """``POST /v1/sessions``: a server-side agent loop.

    ``tools``: a name picks a server tool of the registry (run by the tool workers); a function
    definition (``{"type": "function", "function": {...}}``, or the bare function) declares a
    client tool (its calls are sent to the client, which posts the result).  Omitted: every
    server tool.
    """

    model_config = _examples(
        {"messages": [{"role": "system", "content": "You are a concise assistant."}, _ASK], "max_turns": 4},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Where is order A17?"}]}],
         "tools": ["get_weather", {"name": "lookup_order", "description": "Find an order",
                                   "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}],
         "max_tokens": 128, "temperature": 0.7, "seed": 7, "stop": ["\n\n"]})

    messages: list[Message] = Field(min_length=1)
    tools: list[Annotated[str, Field(pattern=NAME_PATTERN)] | ToolDef | FunctionDef] | None = None
    max_turns: int | None = Field(default=None, ge=1)
    max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    stop: list[str] | None = Field(default=None, max_length=8)
    # held by the decoder's grammar; required/named bind each turn that answers a user message
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    response_format: ResponseFormat | None = None
    # per turn (item i holds turn i; later turns are free) or one for every turn
    structured_outputs: StructuredOutputs | Annotated[list[StructuredOutputs], Field(max_length=256)] | None = None
    replay: Replay = None

    _replay = field_validator("replay")(_check_replay)

    @field_validator("tools")
    @classmethod
    def _bare_functions(cls, v: list[str | ToolDef | FunctionDef] | None) -> list[str | ToolDef] | None:
        """A bare function is read as ``{"type": "function", "function": ...}``."""
        return None if v is None else [ToolDef(type="function", function=t) if isinstance(t, FunctionDef) else t
                                       for t in v]


class AddMessage(BaseModel):
    """``POST /v1/sessions/{id}/messages``: continue an ended session with a user message."""

    model_config = _examples({"content": "And in Oslo?"}, {"content": [{"type": "text", "text": "Thanks!"}],
                                                           "max_turns": 2})

    content: str | list[TextPart]
    max_turns: int | None = Field(default=None, ge=1, description="turns allowed for this message (default: config)")


class ToolResultIn(BaseModel):
    """The result of a client-side tool call (HTTP body item, or a WebSocket ``tool_result`` message)."""

    model_config = _examples({"tool_call_id": "call_0_0", "content": "{\"status\": \"shipped\"}"},
                             {"tool_call_id": "call_0_1", "content": "no such order", "is_error": True})

    tool_call_id: str = Field(min_length=1, max_length=200)
    content: str | list[TextPart]
    is_error: bool = False

    @property
    def text(self) -> str:
        return flatten(self.content) or ""


# --------------------------------------------------------------------------- OpenAI API
class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions`` (the fields turnstream honours; others are ignored)."""

    model_config = _examples(
        {"model": "tiny-agent", "messages": [_ASK], "tools": [_WEATHER], "tool_choice": "auto", "max_tokens": 128},
        {"model": "tiny-agent", "stream": True, "stream_options": {"include_usage": True}, "tools": [_WEATHER],
         "messages": [_ASK, {"role": "assistant", "content": None, "tool_calls": [{
             "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
             {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21}"}]})

    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    stop: str | list[str] | None = None
    n: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None  # vLLM's extension (extra_body)
    user: str | None = None
    replay: Replay = None

    _replay = field_validator("replay")(_check_replay)

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v
