"""Session events -> Anthropic Messages stream events and message (pure: no I/O).

``MessageStream`` reads a turn's output as chat completions do (``gateway.translator.TurnOutput``:
tool_choice filtering, parallel calls, seamless regenerated turns, usage) and groups it into
Anthropic's content blocks and events, exactly as the ``anthropic`` package's types have them:

    message_start      {"message": {"id", "type": "message", "role": "assistant", "model",
                                    "content": [], "stop_reason": null, "stop_sequence": null, "usage"}}
    ping
    content_block_start {"index", "content_block": {"type": "text", "text": ""}
                                                 | {"type": "thinking", "thinking": "", "signature": ""}
                                                 | {"type": "tool_use", "id", "name", "input": {}}}
    content_block_delta {"index", "delta": text_delta {"text"} | thinking_delta {"thinking"}
                                           | input_json_delta {"partial_json"}}
    content_block_stop  {"index"}
    message_delta      {"delta": {"stop_reason", "stop_sequence"}, "usage": cumulative counts}
                       (stop_reason "stop_sequence" names the request's stop string that ended the turn)
    message_stop

``message_start`` goes out when the decoder admits the turn (``turn.started``: its prompt
counts are real), or with the first output if that came first.  Blocks follow each other:
a new kind of output closes the open block.  Whitespace-only text between blocks (the
newlines a model writes around its calls) opens no block of its own.  Reasoning becomes
thinking blocks only when the request asked for thinking (``MessageOptions.thinking``).

``stop_reason``: ``max_tokens`` when cut off, ``tool_use`` when calls are returned, else
``end_turn``.  Usage: ``input_tokens`` are the prompt tokens not read from the KV cache,
``cache_read_input_tokens`` the ones that were (the session's prefix reuse),
``cache_creation_input_tokens`` is 0.  ``message()`` is the non-streamed ``Message``, built
from the same blocks, so both modes return the same message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.translator import CALL, REASONING, TEXT, Call, Diverged, ToolPolicy, TurnOutput
from schemas.events import Event, TurnStarted


@dataclass(frozen=True)
class MessageOptions:
    message_id: str
    model: str
    thinking: bool = False


class MessageStream:
    """The stream events of one Messages response (see the module doc)."""

    def __init__(self, opts: MessageOptions, policy: ToolPolicy) -> None:
        self.opts = opts
        self.out = TurnOutput(policy)
        self.blocks: list[dict[str, Any]] = []  # content blocks as started (empty text, thinking, input)
        self._pieces: list[list[str]] = []  # each block's streamed deltas, joined once by message()
        self.open: int | None = None  # index of the open block
        self._calls: dict[int, int] = {}  # returned call's output index -> its block's index
        self._space = ""  # whitespace held back while no text block is open
        self.started = False

    @property
    def ended(self) -> bool:
        return self.out.ended

    # ------------------------------------------------------------------ events in
    def start(self) -> list[dict[str, Any]]:
        return []  # message_start waits for turn.started: its prompt counts are real then

    def feed(self, ev: Event) -> list[dict[str, Any]]:
        """Stream events for one session event (often none).  Raises UpstreamError or Diverged."""
        pieces = self.out.feed(ev)
        out = self._start() if not self.started and (pieces or isinstance(ev.body, TurnStarted)) else []
        for piece in pieces:
            out += self._piece(piece)
        return out

    def _start(self) -> list[dict[str, Any]]:
        self.started = True
        message = {"id": self.opts.message_id, "type": "message", "role": "assistant", "model": self.opts.model,
                   "content": [], "stop_reason": None, "stop_sequence": None, "usage": self.usage(output=False)}
        return [{"type": "message_start", "message": message}, {"type": "ping"}]

    def _piece(self, piece: tuple[Any, ...]) -> list[dict[str, Any]]:
        kind = piece[0]
        if kind is TEXT:
            return self._text(piece[1])
        if kind is REASONING:
            if not self.opts.thinking:
                return []
            return self._open("thinking") + [self._block_delta({"type": "thinking_delta", "thinking": piece[1]})]
        return self._call(piece[1]) if kind is CALL else self._args(piece[1], piece[2])

    def _text(self, text: str) -> list[dict[str, Any]]:
        if self._kind() != "text":
            if not text.strip():
                self._space += text
                return []
            text, self._space = self._space + text, ""
        return self._open("text") + [self._block_delta({"type": "text_delta", "text": text})]

    def _call(self, call: Call) -> list[dict[str, Any]]:
        self._space = ""
        out = self._close()
        self._calls[call.out] = len(self.blocks)
        return out + self._begin({"type": "tool_use", "id": call.id, "name": call.name, "input": {}})

    def _args(self, call: Call, fragment: str) -> list[dict[str, Any]]:
        at = self._calls.get(call.out)
        if at is None or at != self.open:
            raise Diverged("regenerated arguments of a call whose block was closed")
        return [self._block_delta({"type": "input_json_delta", "partial_json": fragment})]

    # ------------------------------------------------------------------ blocks
    def _kind(self) -> str | None:
        return None if self.open is None else self.blocks[self.open]["type"]

    def _open(self, kind: str) -> list[dict[str, Any]]:
        if self._kind() == kind:
            return []
        empty = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": "", "signature": ""}}
        return self._close() + self._begin(empty[kind])

    def _begin(self, block: dict[str, Any]) -> list[dict[str, Any]]:
        self.open = len(self.blocks)
        self.blocks.append(dict(block))
        self._pieces.append([])
        return [{"type": "content_block_start", "index": self.open, "content_block": block}]

    def _close(self) -> list[dict[str, Any]]:
        if self.open is None:
            return []
        index, self.open = self.open, None
        return [{"type": "content_block_stop", "index": index}]

    def _block_delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        value = next(v for k, v in delta.items() if k != "type")
        self._pieces[self.open].append(value)  # type: ignore[index]  # a list: no copy of the block per delta
        return {"type": "content_block_delta", "index": self.open, "delta": delta}

    # ------------------------------------------------------------------ the end
    def stop_reason(self) -> str:
        if self.out.finish_reason == "length":
            return "max_tokens"
        if self.out.calls:
            return "tool_use"
        return "stop_sequence" if self.out.stop_sequence is not None else "end_turn"

    def stop_sequence(self) -> str | None:
        return self.out.stop_sequence if self.stop_reason() == "stop_sequence" else None

    def usage(self, output: bool = True) -> dict[str, Any]:
        o = self.out
        return {"input_tokens": max(0, o.prompt_tokens - o.cached_tokens), "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": o.cached_tokens, "output_tokens": o.completion_tokens if output else 0}

    def finish(self) -> list[dict[str, Any]]:
        """The closing events: the open block's stop, ``message_delta``, ``message_stop``."""
        out = [] if self.started else self._start()
        out += self._close()
        delta = {"stop_reason": self.stop_reason(), "stop_sequence": self.stop_sequence()}
        return out + [{"type": "message_delta", "delta": delta, "usage": self.usage()},
                      {"type": "message_stop"}]

    def message(self) -> dict[str, Any]:
        """The non-streamed ``Message`` (the same blocks the events assemble to)."""
        content = [_final(b, "".join(pieces)) for b, pieces in zip(self.blocks, self._pieces)]
        return {"id": self.opts.message_id, "type": "message", "role": "assistant", "model": self.opts.model,
                "content": content, "stop_reason": self.stop_reason(), "stop_sequence": self.stop_sequence(),
                "usage": self.usage()}


def _final(block: dict[str, Any], streamed: str) -> dict[str, Any]:
    """A streamed block as it appears in a whole message: its text (or thinking) is what was
    streamed; a tool_use's input is the streamed JSON as an object."""
    if block["type"] != "tool_use":
        return {**block, block["type"]: streamed}
    try:
        parsed = json.loads(streamed or "{}")
    except json.JSONDecodeError:
        parsed = {}  # cut off by max_tokens: the stream had only part of it
    return {**block, "input": parsed if isinstance(parsed, dict) else {}}
