"""Folding a parser's events into a turn, checking the event-stream invariants on the way."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from schemas.events import (
    ContentDelta,
    ParseBody,
    ReasoningDelta,
    ToolCallArgs,
    ToolCallBegin,
    ToolCallInvalid,
    ToolCallReady,
)


class ParseContractError(AssertionError):
    """The events break the parser contract (fragments, begin-once, ids, order)."""


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """A ready call: what is dispatched."""

    index: int
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class InvalidCall:
    """A malformed (``truncated=False``) or cut-off call: never dispatched."""

    index: int
    id: str
    name: str
    raw: str
    error: str
    truncated: bool


@dataclass(frozen=True, slots=True)
class Turn:
    """The parsed turn: content, reasoning, ready calls (by index) and invalid calls."""

    content: str
    reasoning: str
    calls: list[ParsedCall] = field(default_factory=list)
    invalid: list[InvalidCall] = field(default_factory=list)


class _Folder:
    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.begun: dict[int, ToolCallBegin] = {}
        self.frags: dict[int, list[str]] = {}
        self.closed: set[int] = set()
        self.ids: set[str] = set()
        self.calls: list[ParsedCall] = []
        self.invalid: list[InvalidCall] = []

    def add(self, ev: ParseBody) -> None:
        match ev:
            case ContentDelta(text=t):
                self.content.append(t)
            case ReasoningDelta(text=t):
                self.reasoning.append(t)
            case ToolCallBegin():
                self._begin(ev)
            case ToolCallArgs(index=i, delta=d):
                self._open(i, "fragment").append(d)
            case ToolCallReady():
                self._ready(ev)
            case ToolCallInvalid():
                self._invalid(ev)
            case _:
                raise ParseContractError(f"not a parse event: {ev!r}")

    def _begin(self, ev: ToolCallBegin) -> None:
        if ev.index in self.begun or ev.index in self.closed:
            raise ParseContractError(f"call {ev.index} begun twice")
        self.begun[ev.index] = ev
        self.frags[ev.index] = []

    def _open(self, index: int, what: str) -> list[str]:
        if index not in self.begun or index in self.closed:
            raise ParseContractError(f"{what} for call {index} outside begin..end")
        return self.frags[index]

    def _close(self, index: int, call_id: str) -> None:
        if index in self.closed:
            raise ParseContractError(f"call {index} ended twice")
        if call_id in self.ids:
            raise ParseContractError(f"call id {call_id!r} used twice")
        self.closed.add(index)
        self.ids.add(call_id)

    def _ready(self, ev: ToolCallReady) -> None:
        joined = "".join(self._open(ev.index, "ready"))
        begin = self.begun[ev.index]
        if joined != ev.arguments:
            raise ParseContractError(f"call {ev.index}: fragments {joined!r} != arguments {ev.arguments!r}")
        if (begin.id, begin.name) != (ev.id, ev.name):
            raise ParseContractError(f"call {ev.index}: ready id/name differ from begin")
        self._close(ev.index, ev.id)
        self.calls.append(ParsedCall(ev.index, ev.id, ev.name, ev.arguments))

    def _invalid(self, ev: ToolCallInvalid) -> None:
        begin = self.begun.get(ev.index)
        if begin is not None and begin.id != ev.id:
            raise ParseContractError(f"call {ev.index}: invalid id differs from begin")
        self._close(ev.index, ev.id)
        self.invalid.append(InvalidCall(ev.index, ev.id, ev.name, ev.raw, ev.error, ev.truncated))

    def turn(self) -> Turn:
        dangling = set(self.begun) - self.closed
        if dangling:
            raise ParseContractError(f"calls {sorted(dangling)} never ended (missing finish()?)")
        indices = sorted(self.closed)
        if indices != list(range(len(indices))):
            raise ParseContractError(f"call indices not contiguous: {indices}")
        return Turn("".join(self.content), "".join(self.reasoning),
                    sorted(self.calls, key=lambda c: c.index), sorted(self.invalid, key=lambda c: c.index))


def collect(events: Iterable[ParseBody]) -> Turn:
    """Fold parse events into a ``Turn``; raise ``ParseContractError`` if they break the contract."""
    folder = _Folder()
    for ev in events:
        folder.add(ev)
    return folder.turn()
