"""Session events -> OpenAI Responses streaming events (pure: no I/O).

``ResponseStream`` translates the event log of one session (a response is a session) into
the events of ``openai.types.responses.ResponseStreamEvent``, each with its
``sequence_number``, and keeps the ``Response`` object they describe (``snapshot()``).  The
translation is deterministic: the same log gives the same events with the same numbers, so a
stream resumed with ``starting_after=N`` is the translation from the start with every event
``<= N`` left out.

    start()                      response.created, response.in_progress
    reasoning.delta              [output_item.added (reasoning), content_part.added]
                                 response.reasoning_text.delta
    content.delta                [output_item.added (message), content_part.added]
                                 response.output_text.delta
    tool_call.begin  client tool output_item.added (function_call)
                     server tool output_item.added (mcp_call), response.mcp_call.in_progress
    tool_call.args               response.function_call_arguments.delta | response.mcp_call_arguments.delta
    tool_call.ready              function_call_arguments.done, output_item.done | mcp_call_arguments.done
    tool.result (server tool)    response.mcp_call.completed | .failed, output_item.done
    a text item ends             output_text.done | reasoning_text.done, content_part.done, output_item.done
      (a call begins, the turn ends)
    session.ended                response.completed | response.incomplete (max_output_tokens, max_messages
                                 for max_turns) | response.failed; nothing more for "cancelled"

Output policies as in chat completions (``gateway.openai.format``): ``tool_choice: "none"``
returns no calls, a named function drops calls of others, ``parallel_tool_calls: false``
returns a turn's first client call only.  A turn regenerated after a decoder died
(``turn.restarted`` or a higher attempt) is matched item by item against what was already
sent; only text beyond it goes out, and a regenerated turn that disagrees fails the response.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.responses.output import OutputItem, Policy, ResponseHead, Usage, exposed_call_id, usage_object
from gateway.translator import Diverged
from schemas.events import (PARSE_BODIES, ContentDelta, ErrorEvent, Event, ReasoningDelta, SessionEnded, ToolCallArgs,
                            ToolCallBegin, ToolCallInvalid, ToolCallReady, ToolResult, TurnEnded, TurnRestarted,
                            TurnStarted)

_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}
_ATTEMPTED = (*PARSE_BODIES, TurnStarted, TurnEnded, TurnRestarted)


@dataclass
class _Turn:
    attempt: int = 0
    items: list[OutputItem] = field(default_factory=list)  # this turn's items, in order
    pos: int = 0  # how many of them the current attempt has reached
    by_index: dict[int, OutputItem | None] = field(default_factory=dict)  # current attempt: call index -> item
    calls: dict[int, OutputItem] = field(default_factory=dict)  # call index -> item, across attempts
    open: OutputItem | None = None  # the text item the current attempt is writing
    blank: str = ""  # whitespace not yet in any item: it opens none by itself
    usage: Usage = field(default_factory=Usage)
    finish: str | None = None


class ResponseStream:
    """The event stream and the Response object of one response (see the module doc)."""

    def __init__(self, head: ResponseHead, policy: Policy, after: int = -1) -> None:
        self.head, self.policy = head, policy
        self.after = after  # events up to this sequence number are translated but not returned (a resumed stream)
        self.seq = -1
        self.items: list[OutputItem] = []
        self.turns: dict[int, _Turn] = {}
        self.status = "in_progress"
        self.error: dict[str, Any] | None = None
        self.incomplete: str | None = None
        self.completed_at: int | None = None
        self._error_text: str | None = None

    @property
    def ended(self) -> bool:
        return self.status != "in_progress"

    # ------------------------------------------------------------------ events out
    def _ev(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq, **fields}

    def start(self) -> list[dict[str, Any]]:
        snap = self.snapshot()
        events = [self._ev("response.created", response=snap), self._ev("response.in_progress", response=snap)]
        return self._past(events)

    def finish(self) -> list[dict[str, Any]]:
        return []  # the terminal event went out with session.ended

    def _past(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``events`` without those a resuming client already has."""
        if self.after < 0 or not events or events[0]["sequence_number"] > self.after:
            return events
        return [e for e in events if e["sequence_number"] > self.after]

    def snapshot(self) -> dict[str, Any]:
        """The Response object as it stands."""
        final = self.ended
        usage = usage_object([t.usage for t in self.turns.values()]) if final else None
        return self.head.response(self.status, [i.obj() for i in self.items], usage=usage, error=self.error,
                                  incomplete=self.incomplete, completed_at=self.completed_at)

    # ------------------------------------------------------------------ events in
    def feed(self, ev: Event) -> list[dict[str, Any]]:
        """The Responses events for one session event (often none)."""
        if self.ended:
            return []
        turn = self.turns.setdefault(ev.turn, _Turn())
        if isinstance(ev.body, _ATTEMPTED):
            if ev.attempt < turn.attempt:
                return []  # a stale attempt
            if ev.attempt > turn.attempt:
                self._restart(turn, ev.attempt)
        try:
            return self._past(self._dispatch(ev, turn))
        except Diverged as exc:
            return self._past(self._fail(f"generation failed: {exc}"))

    def _dispatch(self, ev: Event, turn: _Turn) -> list[dict[str, Any]]:
        body = ev.body
        match body:
            case ContentDelta(text=text):
                return self._text(turn, "message", text)
            case ReasoningDelta(text=text):
                return self._text(turn, "reasoning", text)
            case ToolCallBegin():
                return self._begin(turn, ev.turn, body)
            case ToolCallArgs():
                return self._args(turn, body)
            case ToolCallReady() | ToolCallInvalid():
                return self._args_done(turn, body)
            case ToolResult():
                return self._result(turn, body)
            case TurnStarted():
                turn.usage.prompt, turn.usage.cached = body.prompt_tokens, body.cached_tokens
            case TurnEnded():
                turn.usage.completion, turn.finish = body.completion_tokens, body.finish_reason
                return self._close_turn(turn)
            case TurnRestarted():
                self._restart(turn, turn.attempt)
            case ErrorEvent():
                self._error_text = body.message
            case SessionEnded():
                return self._end(body, ev.ts)
        return []

    def _restart(self, turn: _Turn, attempt: int) -> None:
        turn.attempt, turn.pos, turn.open, turn.blank = attempt, 0, None, ""
        turn.by_index.clear()
        for item in turn.items:
            item.text.restart()

    def _next(self, turn: _Turn, kind: str, **kw: Any) -> tuple[OutputItem, bool]:
        """The turn's next item: the one an earlier attempt already sent there, else a new one."""
        if turn.pos < len(turn.items):
            item = turn.items[turn.pos]
            turn.pos += 1
            if item.kind != kind or item.name != kw.get("name", ""):
                raise Diverged(f"regenerated output item {item.out} is not a {kind} like before")
            return item, False
        item = OutputItem.new(kind, len(self.items), self.head.sid, **kw)
        self.items.append(item)
        turn.items.append(item)
        turn.pos += 1
        return item, True

    # ------------------------------------------------------------------ text items
    def _text(self, turn: _Turn, kind: str, delta: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        item = turn.open
        if item is None or item.kind != kind:
            if not (turn.blank + delta).strip():
                turn.blank += delta  # whitespace between calls is no message of its own
                return out
            delta, turn.blank = turn.blank + delta, ""
            out += self._close_open(turn)
            item, new = self._next(turn, kind)
            turn.open = item
            if new:
                out += self._open_text(item)
        frag = item.text.add(delta)
        if frag and item.done:
            raise Diverged("regenerated text goes beyond an item already completed")
        if frag:
            name = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
            extra = {"logprobs": []} if kind == "message" else {}
            out.append(self._ev(name, item_id=item.id, output_index=item.out, content_index=0, delta=frag, **extra))
        return out

    def _open_text(self, item: OutputItem) -> list[dict[str, Any]]:
        added = self._ev("response.output_item.added", output_index=item.out, item=item.obj())
        item.part_open = True
        return [added, self._ev("response.content_part.added", item_id=item.id, output_index=item.out,
                                content_index=0, part=item.part())]

    def _close_open(self, turn: _Turn) -> list[dict[str, Any]]:
        item, turn.open, turn.blank = turn.open, None, ""
        if item is None or item.done:
            return []
        item.done, item.status = True, "completed"
        name = "response.output_text.done" if item.kind == "message" else "response.reasoning_text.done"
        extra = {"logprobs": []} if item.kind == "message" else {}
        loc = {"item_id": item.id, "output_index": item.out, "content_index": 0}
        return [self._ev(name, **loc, text=item.text.sent, **extra),
                self._ev("response.content_part.done", **loc, part=item.part()),
                self._ev("response.output_item.done", output_index=item.out, item=item.obj())]

    # ------------------------------------------------------------------ calls
    def _offered(self, turn: _Turn, name: str) -> bool:
        if self.policy.server(name) is not None:
            return True
        if not self.policy.offer_tools or (self.policy.named and name != self.policy.named):
            return False
        returned = sum(1 for c in turn.by_index.values() if c is not None and c.kind == "function_call")
        return self.policy.parallel or returned == 0

    def _begin(self, turn: _Turn, turn_no: int, body: ToolCallBegin) -> list[dict[str, Any]]:
        out = self._close_open(turn)
        if not self._offered(turn, body.name):
            turn.by_index[body.index] = None
            return out
        server = self.policy.server(body.name)
        if server is None:
            item, new = self._next(turn, "function_call", name=body.name, namespace=self.policy.namespaces.get(
                body.name, ""), call_id=exposed_call_id(self.head.sid, body.id))
        else:
            item, new = self._next(turn, "mcp_call", name=server[1], label=server[0])
        turn.by_index[body.index] = turn.calls[body.index] = item
        if not new:
            return out
        out.append(self._ev("response.output_item.added", output_index=item.out, item=item.obj()))
        if item.kind == "mcp_call":
            out.append(self._ev("response.mcp_call.in_progress", item_id=item.id, output_index=item.out))
        return out

    def _args(self, turn: _Turn, body: ToolCallArgs) -> list[dict[str, Any]]:
        item = turn.by_index.get(body.index)
        if item is None:
            return []
        frag = item.text.add(body.delta)
        if not frag:
            return []
        if item.args_done:
            raise Diverged("regenerated call arguments go beyond the ones already completed")
        kind = "function_call" if item.kind == "function_call" else "mcp_call"
        return [self._ev(f"response.{kind}_arguments.delta", item_id=item.id, output_index=item.out, delta=frag)]

    def _args_done(self, turn: _Turn, body: ToolCallReady | ToolCallInvalid) -> list[dict[str, Any]]:
        item = turn.by_index.get(body.index)
        if item is None or item.args_done:
            return []
        item.args_done = True
        loc = {"item_id": item.id, "output_index": item.out}
        if item.kind == "mcp_call":
            return [self._ev("response.mcp_call_arguments.done", **loc, arguments=item.text.sent)]
        item.done, item.status = True, "completed" if isinstance(body, ToolCallReady) else "incomplete"
        return [self._ev("response.function_call_arguments.done", **loc, arguments=item.text.sent),
                self._ev("response.output_item.done", output_index=item.out, item=item.obj())]

    def _result(self, turn: _Turn, body: ToolResult) -> list[dict[str, Any]]:
        item = turn.calls.get(body.index)
        if item is None or item.kind != "mcp_call" or item.done:
            return []
        item.done = True
        if body.is_error:
            item.status, item.error = "failed", {"type": "mcp_tool_execution_error",
                                                 "content": [{"type": "text", "text": body.content}]}
        else:
            item.status, item.output = "completed", body.content
        kind = "response.mcp_call.failed" if body.is_error else "response.mcp_call.completed"
        return [self._ev(kind, item_id=item.id, output_index=item.out),
                self._ev("response.output_item.done", output_index=item.out, item=item.obj())]

    # ------------------------------------------------------------------ the end
    def _close_turn(self, turn: _Turn) -> list[dict[str, Any]]:
        out = self._close_open(turn)
        for item in turn.items:
            if item.kind == "function_call" and not item.done:
                item.done, item.status = True, "incomplete"  # begun but never completed (cut off)
                out.append(self._ev("response.output_item.done", output_index=item.out, item=item.obj()))
        return out

    def _end(self, body: SessionEnded, ts: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for turn in self.turns.values():
            out += self._close_turn(turn)
        for item in self.items:
            if not item.done:  # a server call that never got its result (cancelled)
                item.done, item.status = True, "incomplete"
                out.append(self._ev("response.output_item.done", output_index=item.out, item=item.obj()))
        if body.reason == "error" or self._error_text:
            return out + self._fail(self._error_text or "the response failed")
        last = self.turns[max(self.turns)].finish if self.turns else None
        if body.reason == "cancelled":
            self.status = "cancelled"
            return out
        if body.reason in ("length", "max_turns") or last == "length":
            self.status = "incomplete"
            self.incomplete = "max_messages" if body.reason == "max_turns" else "max_output_tokens"
        else:
            self.status, self.completed_at = "completed", int(ts)
        return out + [self._ev(_TERMINAL[self.status], response=self.snapshot())]

    def _fail(self, message: str) -> list[dict[str, Any]]:
        self.status, self.error = "failed", {"code": "server_error", "message": message[:2000]}
        return [self._ev("response.failed", response=self.snapshot())]
