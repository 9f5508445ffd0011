"""What every API's translator shares: the contract a runner drives (session events in, one API's
frames out), the two ways a relayed turn fails (``UpstreamError``, ``Diverged``), and
``StreamedText``, the text of one output streamed once across a turn's attempts.

A translator is pure (no I/O): ``feed(event)`` returns the frames the event produces (often
none), ``finish()`` the closing frames once the session ended, and ``ended`` says whether the
session's end was seen (a runner that stops before then cancels the session)."""

from __future__ import annotations

from typing import Any, Protocol

from schemas.events import Event


class Translator(Protocol):
    """Session events -> one API's output items (pure)."""

    ended: bool

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
