"""pythonic: Llama 3.2 / ToolACE ``[f(a='x'), g()]`` and Llama 4 ``<|python_start|>[...]<|python_end|>``.

    [get_weather(city='San Francisco', days=3), get_time()]
     ^name      ^kw  ^value (Python literal -> JSON)     each call is ready at its ``)``

Without tags a call list starts at ``[`` + identifier + ``(``; other brackets are prose.
Keyword values are Python literals (quotes, True/False/None, tuples, dicts) converted to JSON
with the model's number digits kept.  Positional arguments and non-literals are invalid.
"""

from __future__ import annotations

import re

from workers.parser.core import NAME_MAX, T_CALL
from workers.parser.formats.pyliteral import literal_to_json
from workers.parser.scan import MAYBE, NO_MATCH, PATTERN_HOLD_MAX, PatternFn, skip_ws
from workers.parser.schema import json_string
from workers.parser.states import FormatParser

START, END = "<|python_start|>", "<|python_end|>"
T_TAGGED = "tagged"
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_IDENT_CHARS = re.compile(r"[A-Za-z0-9_.\-]*")


def call_list_start(buf: str, i: int) -> int:
    """Pattern start: ``[`` + optional whitespace + identifier + optional whitespace + ``(``."""
    j = skip_ws(buf, i + 1)
    m = IDENT.match(buf, j)
    if m is None:
        return MAYBE if j >= len(buf) and j - i <= PATTERN_HOLD_MAX else NO_MATCH
    k = skip_ws(buf, m.end())
    if k - i > PATTERN_HOLD_MAX:
        return NO_MATCH
    if k >= len(buf):
        return MAYBE
    return k + 1 if buf[k] == "(" else NO_MATCH


class PyValueScanner:
    """Scans one Python literal up to a top-level ``,`` or ``)`` (not consumed)."""

    _OUT = re.compile(r"""['"()\[\]{},]""").search

    def __init__(self, stop_on_comma: bool = True) -> None:
        self.stop_on_comma = stop_on_comma
        self.quote = ""
        self.esc = False
        self.depth = 0
        self.done = False

    def scan(self, buf: str, pos: int) -> int:
        """Consume up to the end of the value; sets ``done`` when a delimiter is next."""
        n = len(buf)
        while pos < n and not self.done:
            if self.esc:
                self.esc, pos = False, pos + 1
            elif self.quote:
                pos = self._in_string(buf, pos, n)
            else:
                m = self._OUT(buf, pos)
                if m is None:
                    return n
                pos = self._structural(buf[m.start()], m.start())
        return pos

    def _in_string(self, buf: str, pos: int, n: int) -> int:
        i = pos
        while i < n:
            c = buf[i]
            if c == "\\":
                if i + 1 < n:
                    i += 2
                    continue
                self.esc = True
                return n
            if c == self.quote:
                self.quote = ""
                return i + 1
            i += 1
        return n

    def _structural(self, c: str, i: int) -> int:
        if c in "'\"":
            self.quote = c
        elif c in "([{":
            self.depth += 1
        elif self.depth:
            self.depth -= c in ")]}"
        else:
            self.done = c == ")" or (c == "," and self.stop_on_comma)
            return i if self.done else i + 1
        return i + 1


class PythonicParser(FormatParser):
    """Python call lists."""

    FORMAT = "pythonic"
    START_MARKERS = {START: T_TAGGED}
    STRAY_MARKERS = (END,)

    def _pattern_starts(self) -> dict[str, tuple[str, PatternFn]]:
        return {"[": (T_CALL, call_list_start)}

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        self._state = self._list_open if tag == T_TAGGED else self._list_item
        return end if tag == T_TAGGED else start + 1

    def _list_open(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at < len(buf):
            self._state = self._list_item if buf[at] == "[" else self._text
            return at + 1 if buf[at] == "[" else at
        return at

    # ------------------------------------------------------------------ the call's name
    def _list_item(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at >= len(buf):
            return at
        if IDENT.match(buf, at) is None:
            self._state = self._text
            return at + 1 if buf[at] == "]" else at
        self.open_call()
        self._acc: list[str] = []
        self._state = self._read_name
        return at

    def _read_name(self, buf: str, pos: int) -> int:
        end = _IDENT_CHARS.match(buf, pos).end()
        self._acc.append(buf[pos:end])
        self.call.raw.append(buf[pos:end])
        at = skip_ws(buf, end)
        self.call.raw.append(buf[end:at])
        if at >= len(buf):
            return at
        name = "".join(self._acc)
        if buf[at] != "(" or len(name) > NAME_MAX:
            self.recover(f"expected '(' after {name[:40]!r}")
            return at
        self.call.raw.append("(")
        self.name_call(name)
        self.args("{")
        self._nargs = 0
        self._state = self._kwarg
        return at + 1

    def _fail(self, error: str, pos: int) -> int:
        """The call is malformed: skip to its closing parenthesis, then report it."""
        self._error = error
        self._skipper = PyValueScanner(stop_on_comma=False)
        self._state = self._skip_call
        return pos

    def _skip_call(self, buf: str, pos: int) -> int:
        end = self._skipper.scan(buf, pos)
        self.call.raw.append(buf[pos:end])
        if not self._skipper.done:
            return end
        self.call.raw.append(")")
        self.invalid(self._error)
        self._ws = []
        self._state = self._after_call
        return end + 1

    # ------------------------------------------------------------------ keyword arguments
    def _kwarg(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        self.call.raw.append(buf[pos:at])
        if at >= len(buf):
            return at
        if buf[at] == ")":
            self.call.raw.append(")")
            self.args("}")
            self.ready()
            self._ws: list[str] = []
            self._state = self._after_call
            return at + 1
        if IDENT.match(buf, at) is None:
            return self._fail(f"unexpected {buf[at]!r} in the argument list", at)
        self._acc = []
        self._state = self._read_key
        return at

    def _read_key(self, buf: str, pos: int) -> int:
        end = _IDENT_CHARS.match(buf, pos).end()
        self._acc.append(buf[pos:end])
        self.call.raw.append(buf[pos:end])
        at = skip_ws(buf, end)
        self.call.raw.append(buf[end:at])
        if at >= len(buf):
            return at
        key = "".join(self._acc)
        if buf[at] != "=" or len(key) > NAME_MAX:
            return self._fail(f"positional argument or bad keyword near {key[:40]!r}", at)
        self.call.raw.append("=")
        self._key, self._value, self._vacc = key, PyValueScanner(), []
        self._state = self._read_value
        return at + 1

    def _read_value(self, buf: str, pos: int) -> int:
        end = self._value.scan(buf, pos)
        self._vacc.append(buf[pos:end])
        self.call.raw.append(buf[pos:end])
        if not self._value.done:
            return end
        text = "".join(self._vacc)
        value = literal_to_json(text)
        if value is None:
            return self._fail(f"argument {self._key!r} is not a Python literal: {text.strip()[:60]!r}", end)
        sep = ", " if self._nargs else ""
        self._nargs += 1
        self.args(f"{sep}{json_string(self._key)}: {value}")
        if buf[end] == ",":
            self.call.raw.append(",")
            end += 1
        self._state = self._kwarg
        return end

    # ------------------------------------------------------------------ between calls
    def _after_call(self, buf: str, pos: int) -> int:
        """After ``)``: ``,`` (next call) or ``]`` (end of list); any other text is content, whitespace kept."""
        at = skip_ws(buf, pos)
        self._ws.append(buf[pos:at])
        if at >= len(buf):
            return at
        self._state = self._text
        if buf[at] == ",":
            self._state = self._list_item
        elif buf[at] != "]":
            self.content("".join(self._ws))
            return at
        self._ws = []
        return at + 1

    def _at_eof_in_call(self, held: str) -> None:
        if self._state == self._after_call:
            self.content("".join(self._ws))
        super()._at_eof_in_call(held)
