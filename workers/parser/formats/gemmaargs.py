"""Gemma's call-argument notation -> JSON argument fragments, streamed as the model writes them.

    {city:<escape>Paris<escape>,days:3,opts:{units:[<escape>c<escape>]}}
     ^key ^string: verbatim between  ^bare  ^nested object, array
           two quote tokens           value
    ->  {"city": "Paris", "days": 3, "opts": {"units": ["c"]}}

One reader for both families that write it: FunctionGemma quotes with ``<escape>``, Gemma 4 with
``<|"|>`` (the quote is a parameter; nothing else differs).  Keys are bare (up to ``:``, no
``,{}[]<`` or newline; spaces inside kept, the ends trimmed) or quoted.  A string is everything
between two quotes, no escaping.  A bare value runs to the next ``,``, ``}``, ``]`` or ``<``; at the
top level the tool's schema types it (``schema.to_json``), deeper it is a JSON literal or else a
string (a bare word such as ``celsius`` is a string, as vLLM reads both families).  A top-level string
streams as it arrives unless its schema admits no string (then it is typed when it closes).  ``scan``
stops after the outermost ``}``; ``error`` says why the text cannot be arguments (the caller skips
the rest of the call).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from workers.parser.core import NAME_MAX
from workers.parser.formats.envelope import StepReader
from workers.parser.formats.xmlparams import escape_piece
from workers.parser.scan import MAYBE_AT, NO_MATCH, Markers, match_literal, skip_ws
from workers.parser.schema import _types, json_string, to_json

if TYPE_CHECKING:
    from workers.parser.core import StreamParser

_BARE_KEY = re.compile(r"[^:,{}\[\]<\n]*")
_BARE_END = re.compile(r"[,}\]<]")
_CLOSE = {"{": "}", "[": "]"}
T_QUOTE = "quote"


class GemmaArgs(StepReader):
    """Reads one call's ``{...}`` after its opening brace (``scan`` holds a possible quote prefix);
    reports argument fragments to ``parser``."""

    def __init__(self, parser: StreamParser, quote: str) -> None:
        self.p = parser
        self.quote = quote
        self._quotes = Markers({quote: T_QUOTE})
        self.stack: list[str] = []   # open containers, "{" or "["
        self.counts: list[int] = []  # items written in each
        self.key = ""
        self.acc: list[str] = []
        self.typed: dict | None = None  # the schema of a top-level string held until it closes
        self.step = self._key_or_end
        self.done = False
        self.error = ""

    def open(self) -> None:
        """The outermost ``{`` was read: the arguments object starts."""
        self._push("{")

    def _push(self, bracket: str) -> None:
        self.stack.append(bracket)
        self.counts.append(0)
        self.p.args(bracket)

    def _item(self) -> None:
        """A new item of the innermost container: its separator."""
        if self.counts[-1]:
            self.p.args(", ")
        self.counts[-1] += 1

    # ------------------------------------------------------------------ keys
    def _key_or_end(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at < len(buf) and buf[at] == "}":
            return self._close(at)
        return self._key_start(buf, at)

    def _key(self, buf: str, pos: int) -> int:
        return self._key_start(buf, skip_ws(buf, pos))

    def _key_start(self, buf: str, at: int) -> int:
        if at >= len(buf):
            return at
        self.acc = []
        end = match_literal(buf, at, self.quote)
        if end == MAYBE_AT:
            return at
        if end != NO_MATCH:
            self.step = self._quoted_key
            return end
        self.step = self._bare_key
        return at

    def _bare_key(self, buf: str, pos: int) -> int:
        end = _BARE_KEY.match(buf, pos).end()
        self.acc.append(buf[pos:end])
        if sum(map(len, self.acc)) > NAME_MAX:
            return self._fail(f"key longer than {NAME_MAX} characters", end)
        if end < len(buf):
            self.acc = ["".join(self.acc).rstrip()]
            if not self.acc[0]:
                return self._fail(f"expected a key, got {buf[end]!r}", end)
            self.step = self._colon
        return end

    def _quoted_key(self, buf: str, pos: int) -> int:
        hit = self._quotes.find(buf, pos)
        self.acc.append(buf[pos:hit.start])
        if sum(map(len, self.acc)) > NAME_MAX:
            return self._fail(f"key longer than {NAME_MAX} characters", hit.start)
        if hit.tag is None:
            return hit.start
        self.step = self._colon
        return hit.end

    def _colon(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at >= len(buf):
            return at
        if buf[at] != ":":
            return self._fail(f"expected ':' after key {''.join(self.acc)[:40]!r}, got {buf[at]!r}", at)
        self.key = "".join(self.acc)
        self._item()
        self.p.args(json_string(self.key) + ": ")
        self.step = self._value
        return at + 1

    # ------------------------------------------------------------------ values
    def _value_or_end(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at < len(buf) and buf[at] == "]":
            return self._close(at)
        return self._value(buf, at)

    def _value(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at >= len(buf):
            return at
        end = match_literal(buf, at, self.quote)
        if end == MAYBE_AT:
            return at
        c = buf[at]
        if end == NO_MATCH and c in ",}]<":
            return self._fail(f"expected a value, got {c!r}", at)
        if self.stack[-1] == "[":
            self._item()
        if end != NO_MATCH:
            return self._string_start(end)
        if c in "{[":
            self._push(c)
            self.step = self._key_or_end if c == "{" else self._value_or_end
            return at + 1
        self.acc = []
        self.step = self._bare
        return at

    def _top_schema(self) -> dict | None:
        """The tool schema of the current value: a top-level argument's own, else none."""
        if len(self.stack) != 1:
            return None
        return self.p.schemas.param(self.p.call.name, self.key)

    def _string_start(self, pos: int) -> int:
        schema = self._top_schema()
        types = _types(schema)
        self.typed = schema if types and "string" not in types else None
        self.acc = []
        if self.typed is None:
            self.p.args('"')
        self.step = self._string
        return pos

    def _string(self, buf: str, pos: int) -> int:
        hit = self._quotes.find(buf, pos)
        piece = buf[pos:hit.start]
        if self.typed is None:
            self.p.args(escape_piece(piece))
        else:
            self.acc.append(piece)
        if hit.tag is None:
            return hit.start
        self.p.args('"' if self.typed is None else to_json("".join(self.acc), self.typed))
        self.step = self._after
        return hit.end

    def _bare(self, buf: str, pos: int) -> int:
        m = _BARE_END.search(buf, pos)
        end = m.start() if m else len(buf)
        self.acc.append(buf[pos:end])
        if m is None:
            return end
        text = "".join(self.acc).strip()
        if not text:
            return self._fail("empty value", end)
        self.p.args(to_json(text, self._top_schema()))
        self.step = self._after
        return end

    # ------------------------------------------------------------------ between items
    def _after(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at >= len(buf):
            return at
        c = buf[at]
        if c == ",":
            self.step = self._key if self.stack[-1] == "{" else self._value
            return at + 1
        if c == _CLOSE[self.stack[-1]]:
            return self._close(at)
        return self._fail(f"expected ',' or {_CLOSE[self.stack[-1]]!r}, got {c!r}", at)

    def _close(self, at: int) -> int:
        self.p.args(_CLOSE[self.stack.pop()])
        self.counts.pop()
        self.done = not self.stack
        self.step = self._after
        return at + 1
