"""Incremental parser of a JSON call object ``{"name": "...", "arguments": {...}}``.

Used by hermes, llama3_json, mistral and the ``jsoncalls`` families.  Keys may come in any
order; ``parameters`` is an alias of ``arguments``; other keys are skipped.  A family may name
its keys differently (Cohere's ``tool_name``): ``name_keys`` / ``arg_keys``.

The arguments value streams to the parser as the model's own text, fragment by fragment,
straight from a ``JsonScanner`` (no re-parsing).  A string-valued ``arguments`` (double-encoded JSON) is decoded and emitted once complete.

    {"name": "f", "arguments": {"a": 1}}
    ^open ^key   ^value        ^args ... ^next -> done
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from workers.parser.scan import JsonScanner, StringReader, json_error, skip_ws

if TYPE_CHECKING:
    from workers.parser.core import StreamParser

NAME_KEYS = frozenset({"name"})
ARG_KEYS = frozenset({"arguments", "parameters"})


class StepReader:
    """A reader run by its ``step`` method ``(buf, pos) -> pos`` until ``done`` or ``error`` (a message)."""

    step: Callable[[str, int], int]
    done = False
    error = ""

    def scan(self, buf: str, pos: int) -> int:
        """Consume ``buf[pos:]`` up to the end of what is read; a step that neither moves nor switches waits for text."""
        n = len(buf)
        while pos < n and not self.done and not self.error:
            step = self.step
            new = step(buf, pos)
            if new == pos and self.step is step:
                break
            pos = new
        return pos

    def _fail(self, message: str, pos: int) -> int:
        self.error = message
        return pos


class Envelope(StepReader):
    """Parses one call object; reports the name and argument fragments to ``parser``.

    After ``scan``: ``done`` when the closing brace was consumed, ``error`` (a message) when the
    text cannot be a call object.  Nothing after the closing brace is consumed.
    """

    def __init__(self, parser: StreamParser, name_keys: frozenset[str] = NAME_KEYS,
                 arg_keys: frozenset[str] = ARG_KEYS) -> None:
        self.p = parser
        self.name_keys = name_keys
        self.arg_keys = arg_keys
        self.step = self._open
        self.done = False
        self.error = ""
        self.key = ""
        self.sub: JsonScanner | StringReader | None = None
        self.seen: set[str] = set()

    def _expect(self, buf: str, pos: int, chars: str) -> tuple[int, str]:
        """Skip whitespace; return (pos, char) where char is in ``chars``, "" if more text is needed."""
        pos = skip_ws(buf, pos)
        if pos >= len(buf):
            return pos, ""
        c = buf[pos]
        if c not in chars:
            self.error = f"unexpected {c!r} in call object (expected one of {chars!r})"
            return pos, ""
        return pos, c

    def _open(self, buf: str, pos: int) -> int:
        pos, c = self._expect(buf, pos, "{")
        if c:
            self.step = self._first_key
            return pos + 1
        return pos

    def _first_key(self, buf: str, pos: int) -> int:
        pos, c = self._expect(buf, pos, '"}')
        if c == "}":
            self.done = True
            return pos + 1
        return self._start_key(pos) if c else pos

    def _key_required(self, buf: str, pos: int) -> int:
        pos, c = self._expect(buf, pos, '"')
        return self._start_key(pos) if c else pos

    def _start_key(self, pos: int) -> int:
        self.sub = StringReader()
        self.step = self._key
        return pos

    def _key(self, buf: str, pos: int) -> int:
        end = self.sub.scan(buf, pos)
        if self.sub.error:
            return self._fail(self.sub.error, end)
        if self.sub.done:
            self.key = self.sub.value
            self.step = self._colon
        return end

    def _colon(self, buf: str, pos: int) -> int:
        pos, c = self._expect(buf, pos, ":")
        if c:
            self.step = self._value
            return pos + 1
        return pos

    def _value(self, buf: str, pos: int) -> int:
        pos = skip_ws(buf, pos)
        if pos >= len(buf):
            return pos
        slot = "args" if self.key in self.arg_keys else self.key
        if slot in self.seen:
            return self._fail(f"duplicate {self.key!r} in call object", pos)
        self.seen.add(slot)
        if self.key in self.name_keys:
            if buf[pos] != '"':
                return self._fail("name must be a string", pos)
            self._start(StringReader(), self._name)
        elif slot == "args":
            if buf[pos] == '"':
                self._start(StringReader(), self._args_string)
            else:
                self._start(JsonScanner(), self._args)
        else:
            self._start(JsonScanner(), self._skip)
        return pos

    def _start(self, sub: JsonScanner | StringReader, step: Callable[[str, int], int]) -> None:
        self.sub = sub
        self.step = step

    def _name(self, buf: str, pos: int) -> int:
        end = self.sub.scan(buf, pos)
        if self.sub.error:
            return self._fail(self.sub.error, end)
        if self.sub.done:
            self.p.name_call(self.sub.value)
            self.step = self._next
        return end

    def _args(self, buf: str, pos: int) -> int:
        sub = self.sub
        end = sub.scan(buf, pos)
        self.p.args(buf[pos:end])
        if sub.error:
            return self._fail(sub.error, end)
        if sub.done:
            self.step = self._next
        return end

    def _args_string(self, buf: str, pos: int) -> int:
        end = self.sub.scan(buf, pos)
        if self.sub.error:
            return self._fail(self.sub.error, end)
        if self.sub.done:
            error = json_error(self.sub.value)
            if error:
                return self._fail(f"string arguments: {error}", end)
            self.p.args(self.sub.value)
            self.step = self._next
        return end

    def _skip(self, buf: str, pos: int) -> int:
        end = self.sub.scan(buf, pos)
        if self.sub.error:
            return self._fail(self.sub.error, end)
        if self.sub.done:
            self.step = self._next
        return end

    def _next(self, buf: str, pos: int) -> int:
        pos, c = self._expect(buf, pos, ",}")
        if c == ",":
            self.step = self._key_required
            return pos + 1
        if c == "}":
            self.done = True
            return pos + 1
        return pos


class NameKeyEnvelope(Envelope):
    """A call object whose one key is the function's name and whose value is the arguments:
    ``{"get_weather": {"city": "Paris"}}`` (Apertus).  A second key makes the object malformed."""

    def _value(self, buf: str, pos: int) -> int:
        pos = skip_ws(buf, pos)
        if pos >= len(buf):
            return pos
        if self.seen:
            return self._fail("a call object holds one name", pos)
        self.seen.add("args")
        self.p.name_call(self.key)
        self._start(JsonScanner(), self._args)
        return pos
