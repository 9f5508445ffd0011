"""Session events -> OpenAI chat completion objects (pure: no I/O).

``ChatStream`` turns the events of one oneshot session into ``chat.completion.chunk``
dicts exactly as OpenAI streams them:

* the first chunk carries ``role: "assistant"`` (with ``content: null`` when it starts a call);
* content and ``reasoning_content`` deltas as they arrive;
* a call's first delta carries ``index``, ``id``, ``type: "function"`` and ``function.name``
  (``arguments: ""``); later deltas only ``index`` and ``function.arguments`` fragments;
* a final chunk with an empty delta and ``finish_reason`` -- ``tool_calls`` when calls were
  returned (``stop`` for a named ``tool_choice``, as OpenAI does), ``length`` when cut off;
* with ``include_usage``, every chunk has ``usage: null`` and one last chunk has
  ``choices: []`` and the usage.

A turn regenerated after a decoder died (``turn.restarted``) is streamed seamlessly: only
text beyond what was already sent goes out, and it must agree with it (``Diverged`` when
not -- possible only with random sampling).  ``response()`` is the non-streaming object,
built from the same state, so both modes return the same message.

Policies applied to the output (``gateway.translator.TurnOutput``; the decoder only forces how
a turn begins, see ``gateway.openai.api``): only calls of offered functions (``ChatOptions.tools``) are returned,
so with no tools there are none; with ``tool_choice: "none"`` calls are not returned; with a
named function, calls of other functions are dropped; with ``parallel_tool_calls: false`` only
the first call is returned.  ``finish_reason`` is ``tool_calls`` only when a call was returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.translator import CALL, REASONING, TEXT, ToolPolicy, TurnOutput
from schemas.events import Event


@dataclass(frozen=True)
class ChatOptions:
    completion_id: str
    model: str
    created: int
    include_usage: bool = False


class ChatStream:
    """The chunk stream of one chat completion (see the module doc)."""

    def __init__(self, opts: ChatOptions, policy: ToolPolicy) -> None:
        self.opts, self.named = opts, policy.named
        self.out = TurnOutput(policy)
        self._role_sent = False

    @property
    def ended(self) -> bool:
        return self.out.ended

    def start(self) -> list[dict[str, Any]]:
        return []  # the first chunk waits for the first output (it carries the role)

    def feed(self, ev: Event) -> list[dict[str, Any]]:
        """Chunks for one event (often none).  Raises UpstreamError or Diverged."""
        return [self._chunk(_delta(piece)) for piece in self.out.feed(ev)]

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        if not self._role_sent:
            self._role_sent = True
            delta = {"role": "assistant", **({"content": None} if "tool_calls" in delta else {}), **delta}
        chunk = {"id": self.opts.completion_id, "object": "chat.completion.chunk", "created": self.opts.created,
                 "model": self.opts.model, "system_fingerprint": None,
                 "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if self.opts.include_usage:
            chunk["usage"] = None
        return chunk

    def final_reason(self) -> str:
        if self.out.finish_reason == "length":
            return "length"
        if self.out.calls:
            return "stop" if self.named else "tool_calls"
        return "stop"

    def finish(self) -> list[dict[str, Any]]:
        """The closing chunks: the finish_reason chunk, then the usage chunk if asked for."""
        out = []
        if not self._role_sent:
            out.append(self._chunk({"content": ""}))
        out.append(self._chunk({}, self.final_reason()))
        if self.opts.include_usage:
            out.append({"id": self.opts.completion_id, "object": "chat.completion.chunk",
                        "created": self.opts.created, "model": self.opts.model, "system_fingerprint": None,
                        "choices": [], "usage": self.usage_object()})
        return out

    def usage_object(self) -> dict[str, Any]:
        o = self.out
        return {"prompt_tokens": o.prompt_tokens, "completion_tokens": o.completion_tokens,
                "total_tokens": o.prompt_tokens + o.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": o.cached_tokens}}

    def response(self) -> dict[str, Any]:
        """The non-streaming ``chat.completion`` object (the same message the chunks assemble to)."""
        o = self.out
        message: dict[str, Any] = {"role": "assistant", "content": o.content.sent or (None if o.calls else "")}
        if o.reasoning.sent:
            message["reasoning_content"] = o.reasoning.sent
        if o.calls:
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": c.args.sent}} for c in o.calls]
        return {"id": self.opts.completion_id, "object": "chat.completion", "created": self.opts.created,
                "model": self.opts.model, "system_fingerprint": None,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": self.final_reason()}],
                "usage": self.usage_object()}


def _delta(piece: tuple[Any, ...]) -> dict[str, Any]:
    """One piece of a turn's output (``TurnOutput.feed``) as a chunk's delta."""
    kind = piece[0]
    if kind is TEXT:
        return {"content": piece[1]}
    if kind is REASONING:
        return {"reasoning_content": piece[1]}
    call = piece[1]
    if kind is CALL:  # else ARGS
        return {"tool_calls": [{"index": call.out, "id": call.id, "type": "function",
                                "function": {"name": call.name, "arguments": ""}}]}
    return {"tool_calls": [{"index": call.out, "function": {"arguments": piece[2]}}]}
