"""Incremental scanning primitives shared by every format.

Every scanner here consumes text exactly once: it keeps its state (string, escape, bracket
stack, accumulated pieces) across calls, so feeding a text in any chunking costs time linear
in the text.  The only text ever handed back to the caller for a second look is a possible
marker prefix, bounded by the longest marker (or ``PATTERN_HOLD_MAX`` for pattern starts).

    buf:  ....free text....<tool_ca|
                          ^i       ^len(buf)
    Markers.find -> (i, i, None): buf[pos:i] is plain text, buf[i:] may begin a marker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

WS = re.compile(r"[ \t\r\n]*")
PATTERN_HOLD_MAX = 64

# A pattern start: fn(buf, i) -> end index (> i) on a match, NO_MATCH, or MAYBE (need more text).
NO_MATCH = -1
MAYBE = 0
PatternFn = Callable[[str, int], int]


def skip_ws(buf: str, pos: int) -> int:
    """Index of the first non-whitespace character at or after ``pos``."""
    return WS.match(buf, pos).end()


@dataclass(frozen=True, slots=True)
class Hit:
    """Result of ``Markers.find``: ``tag`` None means "no marker yet; hold ``buf[start:]``"."""

    start: int
    end: int
    tag: str | None


class Markers:
    """A set of literal markers (and optional pattern starts), each mapped to a tag."""

    def __init__(self, literals: dict[str, str], patterns: dict[str, tuple[str, PatternFn]] | None = None):
        self.literals = dict(literals)
        self.patterns = dict(patterns or {})
        self._check_prefix_free()
        by_first: dict[str, list[str]] = {}
        for m in sorted(self.literals, key=len, reverse=True):
            by_first.setdefault(m[0], []).append(m)
        self._by_first = by_first
        firsts = set(by_first) | set(self.patterns)
        chars = "".join(re.escape(c) for c in sorted(firsts))
        self._search = re.compile(f"[{chars}]" if chars else r"(?!)").search  # (?!): no marker, no match
        self._maxlen = max((len(m) for m in self.literals), default=0)

    def _check_prefix_free(self) -> None:
        for a in self.literals:
            for b in self.literals:
                if a != b and b.startswith(a):
                    raise ValueError(f"marker {a!r} is a prefix of {b!r}")

    def find(self, buf: str, pos: int) -> Hit:
        """First marker at or after ``pos``, or where a possible marker prefix begins."""
        n = len(buf)
        search = self._search
        while True:
            mt = search(buf, pos)
            if mt is None:
                return Hit(n, n, None)
            i = mt.start()
            hit = self._at(buf, i, n)
            if hit is not None:
                return hit
            pos = i + 1

    def match_at(self, buf: str, i: int) -> Hit | None:
        """The marker starting exactly at ``i``; a Hit with tag None if one may (hold); None if none can."""
        return self._at(buf, i, len(buf))

    def _at(self, buf: str, i: int, n: int) -> Hit | None:
        c = buf[i]
        cands = self._by_first.get(c)
        if cands:
            for m in cands:
                if buf.startswith(m, i):
                    return Hit(i, i + len(m), self.literals[m])
            if n - i < self._maxlen:
                tail = buf[i:]
                for m in cands:
                    if m.startswith(tail):
                        return Hit(i, i, None)
        pat = self.patterns.get(c)
        if pat is not None:
            end = pat[1](buf, i)
            if end > i:
                return Hit(i, end, pat[0])
            if end == MAYBE:
                return Hit(i, i, None)
        return None


_STR_STOP = re.compile(r'["\\]').search
# Outside strings: anything that is not whitespace, a number or a literal letter is interesting.
_OUT_STOP = re.compile(r"[^ \t\r\n0-9,:.+\-eEtrufalsn]").search
_SCALAR = re.compile(r"[0-9A-Za-z.+\-]*")
_CLOSER = {"{": "}", "[": "]"}


class JsonScanner:
    """Tracks one JSON value's structure (strings, escapes, bracket stack) as characters arrive.

    Contract: ``scan(buf, pos)`` consumes ``buf[pos:]`` up to the end of the value and returns
    the index after the last consumed char; ``done`` is set when the value is complete and
    ``error`` (a message) when a character cannot belong to JSON.  It checks structure only;
    callers validate the complete value with ``json.loads``.
    """

    __slots__ = ("stack", "in_str", "esc", "started", "scalar", "done", "error")

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.in_str = False
        self.esc = False
        self.started = False
        self.scalar = False
        self.done = False
        self.error = ""

    def scan(self, buf: str, pos: int) -> int:
        """Consume as much of ``buf[pos:]`` as belongs to the value."""
        if not self.started:
            pos = skip_ws(buf, pos)
            if pos >= len(buf):
                return pos
            pos = self._start(buf, pos)
        if self.scalar:
            return self._scan_scalar(buf, pos)
        return self._scan_body(buf, pos)

    def _start(self, buf: str, pos: int) -> int:
        self.started = True
        c = buf[pos]
        if c in "{[":
            self.stack.append(_CLOSER[c])
        elif c == '"':
            self.in_str = True
        elif c in "-0123456789tfn":
            self.scalar = True
            return pos
        else:
            self.error = f"unexpected {c!r} at start of JSON value"
            return pos
        return pos + 1

    def _scan_scalar(self, buf: str, pos: int) -> int:
        end = _SCALAR.match(buf, pos).end()
        if end < len(buf):
            self.done = True
        return end

    def _scan_body(self, buf: str, pos: int) -> int:
        n = len(buf)
        stack = self.stack
        while pos < n and not self.done and not self.error:
            if self.esc:
                self.esc = False
                pos += 1
            elif self.in_str:
                pos = self._scan_string(buf, pos, n)
            else:
                mt = _OUT_STOP(buf, pos)
                if mt is None:
                    return n
                pos = self._structural(buf[mt.start()], mt.start(), stack)
        return pos

    def _scan_string(self, buf: str, pos: int, n: int) -> int:
        mt = _STR_STOP(buf, pos)
        if mt is None:
            return n
        i = mt.start()
        if buf[i] == "\\":
            self.esc = True
            return i + 1
        self.in_str = False
        if not self.stack:
            self.done = True
        return i + 1

    def _structural(self, c: str, i: int, stack: list[str]) -> int:
        if c == '"':
            self.in_str = True
        elif c == "{" or c == "[":
            stack.append(_CLOSER[c])
        elif c == "}" or c == "]":
            if not stack or stack.pop() != c:
                self.error = f"unbalanced {c!r}"
                return i
            if not stack:
                self.done = True
        else:
            self.error = f"unexpected {c!r} in JSON"
            return i
        return i + 1


class StringReader:
    """Reads one JSON string literal incrementally (the opening quote must be next)."""

    __slots__ = ("scanner", "pieces", "done", "error", "value")

    def __init__(self) -> None:
        self.scanner = JsonScanner()
        self.pieces: list[str] = []
        self.done = False
        self.error = ""
        self.value = ""

    def scan(self, buf: str, pos: int) -> int:
        """Consume up to the closing quote; then ``value`` holds the decoded string."""
        end = self.scanner.scan(buf, pos)
        self.pieces.append(buf[pos:end])
        if self.scanner.error:
            self.error = self.scanner.error
        elif self.scanner.done:
            self._decode()
        return end

    def _decode(self) -> None:
        self.done = True
        try:
            value = json.loads("".join(self.pieces))
        except ValueError as exc:
            self.error = f"bad string: {exc}"
            return
        if not isinstance(value, str):
            self.error = "expected a JSON string"
            return
        self.value = value


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def json_error(text: str, want_object: bool = True) -> str:
    """Why ``text`` is not valid JSON (an object when ``want_object``), or "" if it is."""
    try:
        value = json.loads(text, parse_int=str, parse_float=str, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        return f"invalid JSON: {exc}"
    if want_object and not isinstance(value, dict):
        return f"arguments must be a JSON object, got {type(value).__name__}"
    return ""


def match_literal(buf: str, pos: int, literal: str) -> int:
    """``pos + len(literal)`` if ``buf`` has ``literal`` at ``pos``; MAYBE_AT if it may (held); else NO_MATCH."""
    if buf.startswith(literal, pos):
        return pos + len(literal)
    if literal.startswith(buf[pos:pos + len(literal)]):
        return MAYBE_AT
    return NO_MATCH


MAYBE_AT = -2
