"""llama3_json: Llama 3.1-3.3 JSON calls, with or without ``<|python_tag|>``, ``;``-separated.

    <|python_tag|>{"name": "f", "parameters": {..}}; {"name": "g", "arguments": {..}}

There is no end marker: a call is ready when its object closes.  Without the tag, a call
starts at a ``{`` whose first key is ``"name"``, ``"parameters"`` or ``"arguments"``; any
other brace is prose, released as soon as that is decided.
"""

from __future__ import annotations

from workers.parser.core import T_CALL
from workers.parser.formats.envelope import Envelope
from workers.parser.scan import MAYBE, NO_MATCH, PATTERN_HOLD_MAX, PatternFn, skip_ws
from workers.parser.states import FormatParser

PYTHON_TAG = "<|python_tag|>"
T_TAG = "python_tag"
_KEYS = ('"name"', '"parameters"', '"arguments"')


def json_call_start(buf: str, i: int) -> int:
    """Pattern start: ``{`` + optional whitespace + a call key (see ``scan.Markers``)."""
    j = skip_ws(buf, i + 1)
    if j - i > PATTERN_HOLD_MAX:
        return NO_MATCH
    rest = buf[j:j + 12]
    for key in _KEYS:
        if rest.startswith(key):
            return j + len(key)
        if key.startswith(rest):
            return MAYBE
    return NO_MATCH


class Llama3JsonParser(FormatParser):
    """Bare JSON call objects."""

    FORMAT = "llama3_json"
    START_MARKERS = {PYTHON_TAG: T_TAG}

    def _pattern_starts(self) -> dict[str, tuple[str, PatternFn]]:
        return {"{": (T_CALL, json_call_start)}

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        if tag == T_TAG:
            self._state = self._after_tag
            return end
        return self._begin(start)

    def _begin(self, pos: int) -> int:
        self.open_call()
        self._env = Envelope(self)
        self._state = self._object
        return pos

    def _after_tag(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at >= len(buf):
            return at
        if buf[at] == "{":
            return self._begin(at)
        self._state = self._text
        return at

    def _object(self, buf: str, pos: int) -> int:
        end, done = self.envelope_step(buf, pos)
        if done:
            self.ready()
            self._ws: list[str] = []
            self._state = self._separator
        return end

    def _separator(self, buf: str, pos: int) -> int:
        """After a call: whitespace, then ``;`` (dropped with the whitespace) or text."""
        at = skip_ws(buf, pos)
        self._ws.append(buf[pos:at])
        if at >= len(buf):
            return at
        if buf[at] == ";":
            self._state = self._after_semicolon
            return at + 1
        self.content("".join(self._ws))
        self._state = self._text
        return at

    def _after_semicolon(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at < len(buf):
            self._state = self._text
        return at

    def _at_eof_in_call(self, held: str) -> None:
        if self._state == self._separator:
            self.content("".join(self._ws))
        super()._at_eof_in_call(held)
