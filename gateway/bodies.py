"""What clients send: the request bodies of the session API and the OpenAI API (pydantic).

Static shape rules live here; limits that come from configuration (counts, max_turns,
max_tokens) are checked by ``gateway.limits.check_counts``.  Unknown fields are ignored, as
OpenAI-compatible servers do.  ``replay`` is a test/benchmark extension read only by the
ReplayEngine; it is validated but left out of the OpenAPI schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import jinja2
import jsonschema
from pydantic import BaseModel, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

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


class FunctionDef(BaseModel):
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _schema(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            try:
                jsonschema.validators.validator_for(v).check_schema(v)
            except jsonschema.SchemaError as exc:
                raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
        return v


class ToolDef(BaseModel):
    """An OpenAI function tool definition."""

    type: Literal["function"]
    function: FunctionDef

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


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


# --------------------------------------------------------------------------- session API
class CreateSession(BaseModel):
    """``POST /v1/sessions``: a server-side agent loop.

    ``tools``: a name picks a server tool of the registry (run by the tool workers); a full
    function definition declares a client tool (its calls are sent to the client, which posts
    the result).  Omitted: every server tool.
    """

    messages: list[Message] = Field(min_length=1)
    tools: list[Annotated[str, Field(pattern=NAME_PATTERN)] | ToolDef] | None = None
    max_turns: int | None = Field(default=None, ge=1)
    max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    stop: list[str] | None = Field(default=None, max_length=8)
    replay: Replay = None

    _replay = field_validator("replay")(_check_replay)


class AddMessage(BaseModel):
    """``POST /v1/sessions/{id}/messages``: continue an ended session with a user message."""

    content: str | list[TextPart]
    max_turns: int | None = Field(default=None, ge=1, description="turns allowed for this message (default: config)")


class ToolResultIn(BaseModel):
    """The result of a client-side tool call (HTTP body item, or a WebSocket ``tool_result`` message)."""

    tool_call_id: str = Field(min_length=1, max_length=200)
    content: str | list[TextPart]
    is_error: bool = False

    @property
    def text(self) -> str:
        return flatten(self.content) or ""


# --------------------------------------------------------------------------- OpenAI API
class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(BaseModel):
    include_usage: bool = False


class ResponseFormat(BaseModel):
    type: str


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions`` (the fields turnstream honours; others are ignored)."""

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
    user: str | None = None
    replay: Replay = None

    _replay = field_validator("replay")(_check_replay)

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v
