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

Policies applied to the output (the decoder only forces how a turn begins, see
``gateway.openai.api``): only calls of offered functions (``ChatOptions.tools``) are returned,
so with no tools there are none; with ``tool_choice: "none"`` calls are not returned; with a
named function, calls of other functions are dropped; with ``parallel_tool_calls: false`` only
the first call is returned.  ``finish_reason`` is ``tool_calls`` only when a call was returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.translator import Diverged, StreamedText, UpstreamError
from schemas.events import (ContentDelta, ErrorEvent, Event, ReasoningDelta, SessionEnded, ToolCallArgs, ToolCallBegin,
                            TurnEnded, TurnRestarted, TurnStarted)


@dataclass(frozen=True)
class ChatOptions:
    completion_id: str
    model: str
    created: int
    call_id_base: str  # returned call ids are call_id_base + output index
    offer_tools: bool = True  # False for tool_choice "none"
    named: str | None = None  # the function named by tool_choice
    parallel: bool = True
    include_usage: bool = False
    tools: frozenset[str] = frozenset()  # the offered functions: calls of any other are never returned


@dataclass
class _Call:
    out: int  # index in the returned tool_calls
    id: str
    name: str
    args: StreamedText = field(default_factory=StreamedText)


class ChatStream:
    """The chunk stream of one chat completion (see the module doc)."""

    def __init__(self, opts: ChatOptions) -> None:
        self.opts = opts
        self.content, self.reasoning = StreamedText(), StreamedText()
        self.calls: list[_Call] = []  # returned calls, in output order
        self._by_index: dict[int, _Call | None] = {}  # current attempt: parser index -> call (None: dropped)
        self._attempt = 0
        self._role_sent = False
        self.finish_reason: str | None = None
        self.stop_sequence: str | None = None  # the request's stop string that ended the turn
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
        self.error: ErrorEvent | None = None
        self.ended = False

    # ------------------------------------------------------------------ events in
    def feed(self, ev: Event) -> list[dict[str, Any]]:
        """Chunks for one event (often none).  Raises UpstreamError or Diverged."""
        if ev.attempt < self._attempt and not isinstance(ev.body, SessionEnded):
            return []  # a stale attempt
        if ev.attempt > self._attempt:
            self._restart(ev.attempt)
        deltas = self._deltas(ev.body)
        return [self._chunk(d) for d in deltas]

    def _deltas(self, body: Any) -> list[dict[str, Any]]:
        match body:
            case ContentDelta(text=text):
                return _nonempty({"content": self.content.add(text)}, "content")
            case ReasoningDelta(text=text):
                return _nonempty({"reasoning_content": self.reasoning.add(text)}, "reasoning_content")
            case ToolCallBegin():
                return self._begin(body)
            case ToolCallArgs():
                return self._args(body)
            case TurnStarted():
                self.usage.update(prompt_tokens=body.prompt_tokens, cached_tokens=body.cached_tokens)
            case TurnEnded():
                self.usage["completion_tokens"] = body.completion_tokens
                self.finish_reason = body.finish_reason
                self.stop_sequence = body.stop_sequence
            case TurnRestarted():
                self._restart(self._attempt)
            case ErrorEvent():
                self.error = body
            case SessionEnded():
                self._end(body)
        return []

    def _restart(self, attempt: int) -> None:
        self._attempt = attempt
        self.content.restart()
        self.reasoning.restart()
        self._by_index.clear()
        for call in self.calls:
            call.args.restart()

    def _end(self, body: SessionEnded) -> None:
        self.ended = True
        if self.error is not None:
            raise UpstreamError(self.error.message, self.error.code)
        if body.reason == "error":
            raise UpstreamError("the session failed")
        if self.finish_reason is None:
            self.finish_reason = body.reason

    def _offered(self, name: str) -> bool:
        o = self.opts
        return o.offer_tools and name in o.tools and (not o.named or name == o.named)

    def _begin(self, body: ToolCallBegin) -> list[dict[str, Any]]:
        if not self._offered(body.name):
            self._by_index[body.index] = None
            return []
        out = sum(1 for c in self._by_index.values() if c is not None)
        if out < len(self.calls):  # regenerated: this call was already returned
            call = self.calls[out]
            if call.name != body.name:
                raise Diverged(f"regenerated call {out} is {body.name!r}, not {call.name!r}")
            self._by_index[body.index] = call
            return []
        if self.calls and not self.opts.parallel:
            self._by_index[body.index] = None
            return []
        call = _Call(out, f"{self.opts.call_id_base}{out}", body.name)
        self.calls.append(call)
        self._by_index[body.index] = call
        return [{"tool_calls": [{"index": out, "id": call.id, "type": "function",
                                 "function": {"name": call.name, "arguments": ""}}]}]

    def _args(self, body: ToolCallArgs) -> list[dict[str, Any]]:
        call = self._by_index.get(body.index)
        if call is None:
            return []
        frag = call.args.add(body.delta)
        return [{"tool_calls": [{"index": call.out, "function": {"arguments": frag}}]}] if frag else []

    # ------------------------------------------------------------------ chunks out
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
        if self.finish_reason == "length":
            return "length"
        if self.calls:
            return "stop" if self.opts.named else "tool_calls"
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
        u = self.usage
        return {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"],
                "total_tokens": u["prompt_tokens"] + u["completion_tokens"],
                "prompt_tokens_details": {"cached_tokens": u["cached_tokens"]}}

    def response(self) -> dict[str, Any]:
        """The non-streaming ``chat.completion`` object (the same message the chunks assemble to)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content.sent or (None if self.calls else "")}
        if self.reasoning.sent:
            message["reasoning_content"] = self.reasoning.sent
        if self.calls:
            message["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": c.args.sent}} for c in self.calls]
        return {"id": self.opts.completion_id, "object": "chat.completion", "created": self.opts.created,
                "model": self.opts.model, "system_fingerprint": None,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": self.final_reason()}],
                "usage": self.usage_object()}


def _nonempty(delta: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return [delta] if delta[key] else []
