"""What every API's translator shares: the contract a runner drives (session events in, one API's
frames out), the two ways a relayed turn fails (``UpstreamError``, ``Diverged``),
``StreamedText``, the text of one output streamed once across a turn's attempts, and
``TurnOutput``, what one oneshot turn returns under the request's tool policy (read by the chat
completions and Messages translators, each shaping it its own way).

A translator is pure (no I/O): ``start()`` returns the frames that go out before any event,
``feed(event)`` the frames the event produces (often none), ``finish()`` the closing frames once
the output is complete, and ``ended`` says whether it is (a runner that stops before then cancels
the session): the session's end, or for a oneshot turn (``TurnOutput``) the turn's own
``turn.ended``, which the session's ending follows with nothing the client reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from schemas.events import (ContentDelta, ErrorEvent, Event, ReasoningDelta, SessionEnded, ToolCallArgs, ToolCallBegin,
                            TurnEnded, TurnRestarted, TurnStarted)


class Translator(Protocol):
    """Session events -> one API's output items (pure)."""

    ended: bool

    def start(self) -> list[Any]: ...

    def feed(self, ev: Event) -> list[Any]: ...

    def finish(self) -> list[Any]: ...


class Diverged(Exception):
    """A regenerated turn differs from the part of it already streamed."""


class UpstreamError(Exception):
    """The session failed (an ``error`` event, or ended with reason "error"); ``code`` is the event's."""

    def __init__(self, message: str, code: str = "internal") -> None:
        super().__init__(message)
        self.code = code


class StreamedText:
    """Text streamed once across attempts: ``add`` returns only what goes beyond what was sent.

    Per delta it appends to a list (no string grown by ``+=``); the text is joined when read
    (``sent``), and compared only while a regenerated attempt re-covers text already sent."""

    __slots__ = ("_parts", "_joined", "size", "at")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._joined = ""  # the parts joined so far (kept while nothing new is appended)
        self.size = 0  # length of the text sent
        self.at = 0  # length of the current attempt's text

    @property
    def sent(self) -> str:
        if len(self._joined) != self.size:
            self._joined = "".join(self._parts)
            self._parts = [self._joined]
        return self._joined

    def restart(self) -> None:
        self.at = 0

    def add(self, delta: str) -> str:
        start, self.at = self.at, self.at + len(delta)
        if start >= self.size:  # the common case: beyond everything sent
            if delta:
                self._parts.append(delta)
                self.size += len(delta)
            return delta
        overlap = min(self.at, self.size)
        if self.sent[start:overlap] != delta[: overlap - start]:
            raise Diverged("regenerated text differs from what was streamed")
        new = delta[self.size - start:]
        if new:
            self._parts.append(new)
            self.size += len(new)
        return new


# ---------------------------------------------------------------------------- one oneshot turn
TEXT, REASONING, CALL, ARGS = "text", "reasoning", "call", "args"  # what an event adds to a turn's output


@dataclass(frozen=True)
class ToolPolicy:
    """Which calls a oneshot request gets back (the decoder only forces how a turn begins)."""

    call_id_base: str  # returned call ids are call_id_base + output index
    offer_tools: bool = True  # False for a choice of "none": no call is returned
    named: str | None = None  # the function a choice names: calls of others are dropped
    parallel: bool = True  # False: only the first call is returned
    tools: frozenset[str] = frozenset()  # the offered functions: calls of any other are never returned


@dataclass
class Call:
    out: int  # index in the returned calls
    id: str
    name: str
    args: StreamedText = field(default_factory=StreamedText)


class TurnOutput:
    """The output of one oneshot turn, from its session's events, under a ``ToolPolicy``: what
    both oneshot translators (chat completions, Messages) read before they shape it.

    ``feed`` returns what one event adds, as ``(TEXT, text)``, ``(REASONING, text)``,
    ``(CALL, call)`` (a returned call begins) or ``(ARGS, call, fragment)``.  Events of a stale
    attempt are ignored; a regenerated turn (``turn.restarted`` or a higher attempt) adds only
    what goes beyond what was already returned and must agree with it (``Diverged``).  The end
    of a failed session raises ``UpstreamError``."""

    def __init__(self, policy: ToolPolicy) -> None:
        self.policy = policy
        self.content, self.reasoning = StreamedText(), StreamedText()
        self.calls: list[Call] = []  # returned calls, in output order
        self._by_index: dict[int, Call | None] = {}  # current attempt: parser index -> call (None: dropped)
        self._attempt = 0
        self.finish_reason: str | None = None
        self.stop_sequence: str | None = None  # the request's stop string that ended the turn
        self.prompt_tokens = self.cached_tokens = self.completion_tokens = 0
        self.error: ErrorEvent | None = None
        self.ended = False

    def feed(self, ev: Event) -> list[tuple[Any, ...]]:
        if ev.attempt < self._attempt and not isinstance(ev.body, SessionEnded):
            return []  # a stale attempt
        if ev.attempt > self._attempt:
            self._restart(ev.attempt)
        body = ev.body
        match body:
            case ContentDelta(text=text):
                text = self.content.add(text)
                return [(TEXT, text)] if text else []
            case ReasoningDelta(text=text):
                text = self.reasoning.add(text)
                return [(REASONING, text)] if text else []
            case ToolCallBegin():
                return self._begin(body)
            case ToolCallArgs():
                call = self._by_index.get(body.index)
                frag = call.args.add(body.delta) if call is not None else ""
                return [(ARGS, call, frag)] if frag else []
            case TurnStarted():
                self.prompt_tokens, self.cached_tokens = body.prompt_tokens, body.cached_tokens
            case TurnEnded():
                self.completion_tokens = body.completion_tokens
                self.finish_reason, self.stop_sequence = body.finish_reason, body.stop_sequence
                self._complete()  # the turn is the whole output: its end needs no session.ended
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

    def _complete(self) -> None:
        self.ended = True
        if self.error is not None:
            raise UpstreamError(self.error.message, self.error.code)

    def _end(self, body: SessionEnded) -> None:
        self._complete()
        if body.reason == "error":
            raise UpstreamError("the session failed")
        if self.finish_reason is None:
            self.finish_reason = body.reason

    def _offered(self, name: str) -> bool:
        p = self.policy
        return p.offer_tools and name in p.tools and (not p.named or name == p.named)

    def _begin(self, body: ToolCallBegin) -> list[tuple[Any, ...]]:
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
        if self.calls and not self.policy.parallel:
            self._by_index[body.index] = None
            return []
        call = Call(out, f"{self.policy.call_id_base}{out}", body.name)
        self.calls.append(call)
        self._by_index[body.index] = call
        return [(CALL, call)]
