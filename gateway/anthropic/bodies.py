"""What Anthropic clients send: the bodies of ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

Field names, types and ranges follow the ``anthropic`` package's ``MessageCreateParams`` and
``MessageCountTokensParams``.  Static shape rules live here; what depends on the deployment
(the model, limits, unsupported content such as images) is checked when the request is mapped
onto a session (``gateway.anthropic.plan``), so that the message says what is unsupported
instead of what failed to parse.  Unknown fields are ignored, as other servers do.

Content blocks are told apart by ``type``; a type this server does not take (``image``,
``document``, server-tool blocks, ...) parses as ``OtherBlock`` and is refused with a 400 that
names it.  ``replay`` is the ReplayEngine's test extension, as on the OpenAI routes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from gateway.openai.bodies import NAME_PATTERN, Replay, _check_replay
from gateway.validation import type_tag


class CacheControl(BaseModel):
    """``{"type": "ephemeral", "ttl": "5m" | "1h"}``: accepted wherever Anthropic accepts it."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class _Block(BaseModel):
    cache_control: CacheControl | None = None


class TextBlock(_Block):
    type: Literal["text"]
    text: str


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=200)
    input: dict[str, Any]


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: str = ""


class OtherBlock(BaseModel):
    """A block type this server does not take (images, documents, server tools' blocks ...)."""

    model_config = ConfigDict(extra="allow")
    type: str


def _block_tag(kinds: frozenset[str]) -> Any:
    return lambda value: type_tag(value, kinds)


_RESULT_KINDS = frozenset({"text"})
ResultBlock = Annotated[Annotated[TextBlock, Tag("text")] | Annotated[OtherBlock, Tag("other")],
                        Discriminator(_block_tag(_RESULT_KINDS))]


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1, max_length=200)
    content: str | list[ResultBlock] = ""
    is_error: bool = False


_KINDS = frozenset({"text", "tool_use", "tool_result", "thinking", "redacted_thinking"})
Block = Annotated[Annotated[TextBlock, Tag("text")] | Annotated[ToolUseBlock, Tag("tool_use")]
                  | Annotated[ToolResultBlock, Tag("tool_result")] | Annotated[ThinkingBlock, Tag("thinking")]
                  | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")] | Annotated[OtherBlock, Tag("other")],
                  Discriminator(_block_tag(_KINDS))]


class InputMessage(BaseModel):
    """One conversation turn; ``system`` (a newer SDK's system message) is read as a system prompt."""

    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class Tool(BaseModel):
    """A client tool (``type`` absent or ``"custom"``); other types are server tools, refused when planned."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None
    cache_control: CacheControl | None = None


class ToolChoice(BaseModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False

    @model_validator(mode="after")
    def _named(self) -> ToolChoice:
        if (self.type == "tool") != (self.name is not None):
            raise ValueError("name is required with type 'tool' and only allowed with it")
        return self


class Thinking(BaseModel):
    """Extended thinking: streamed as thinking blocks on a reasoning deployment, else ignored."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=1024)
    display: Literal["summarized", "omitted"] | None = None

    @model_validator(mode="after")
    def _budget(self) -> Thinking:
        if self.type == "enabled" and self.budget_tokens is None:
            raise ValueError("budget_tokens is required with type 'enabled'")
        return self

    @property
    def shown(self) -> bool:
        return self.type != "disabled" and self.display != "omitted"


class Metadata(BaseModel):
    user_id: str | None = Field(default=None, max_length=256)


System = str | list[TextBlock] | None


class CountTokensRequest(BaseModel):
    """``POST /v1/messages/count_tokens``: what a Messages request would put in the prompt."""

    model: str
    messages: list[InputMessage] = Field(min_length=1)
    system: System = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    cache_control: CacheControl | None = None


class MessagesRequest(CountTokensRequest):
    """``POST /v1/messages``."""

    max_tokens: int = Field(ge=1)
    stream: bool = False
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    metadata: Metadata | None = None
    replay: Replay = None

    _replay = field_validator("replay")(_check_replay)

    @field_validator("stop_sequences")
    @classmethod
    def _stops(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (len(v) > 16 or any(not s for s in v)):
            raise ValueError("at most 16 stop sequences, none empty")
        return v

    @model_validator(mode="after")
    def _budget(self) -> MessagesRequest:
        budget = self.thinking.budget_tokens if self.thinking and self.thinking.type == "enabled" else None
        if budget is not None and budget >= self.max_tokens:
            raise ValueError("max_tokens must be greater than thinking.budget_tokens")
        return self
