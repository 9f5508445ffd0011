"""glm45: GLM-4.5 / 4.6 / 4.7 (4.7 writes the same tags without newlines).

    <tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>

One call per ``<tool_call>``; the name is sent at its newline or at the first ``<arg_key>``;
values are typed by the tool schema; the call is ready at ``</tool_call>``.
"""

from __future__ import annotations

from workers.parser.core import T_CALL, T_CLOSE
from workers.parser.scan import Markers, skip_ws
from workers.parser.states import FormatParser
from workers.parser.formats.xmlparams import ParamWriter

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"
T_NL, T_KEY, T_END = "nl", "key", "end"


class Glm45Parser(FormatParser):
    """GLM-4.5/4.7 ``<arg_key>/<arg_value>`` calls."""

    FORMAT = "glm45"
    START_MARKERS = {OPEN: T_CALL}
    STRAY_MARKERS = (CLOSE,)
    RECOVER_MARKERS = {CLOSE: T_CLOSE, OPEN: T_CALL}

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._name_markers = Markers({"\n": T_NL, KEY_OPEN: T_KEY, CLOSE: T_END})
        self._body_markers = Markers({KEY_OPEN: T_KEY, CLOSE: T_END})
        self._key_markers = Markers({KEY_CLOSE: T_END})
        self._acc: list[str] = []

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        self.open_call()
        self._acc = []
        self._state = self._read_name
        return end

    def _read_name(self, buf: str, pos: int) -> int:
        hit = self.read_until(buf, pos, self._name_markers, self._acc)
        if hit.tag is None:
            return hit.start
        name = "".join(self._acc).strip()
        if hit.tag == T_NL and not name:
            return hit.end
        if not name:
            self.recover("empty function name")
            return hit.start
        self.name_call(name)
        self._params = ParamWriter(self, VALUE_CLOSE, trim=False)
        self._params.open()
        return self._at_body_marker(hit.tag, hit.end)

    def _at_body_marker(self, tag: str, end: int) -> int:
        if tag == T_KEY:
            self._acc = []
            self._state = self._read_key
        elif tag == T_END:
            self._params.close_object()
            self.ready_then_text()
        else:
            self._state = self._body
        return end

    def _body(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        self.call.raw.append(buf[pos:at])
        if at >= len(buf):
            return at
        hit = self._body_markers.match_at(buf, at)
        if hit is None:
            self.recover(f"unexpected {buf[at]!r} between arguments")
            return at
        if hit.tag is None:
            return at
        self.call.raw.append(buf[hit.start:hit.end])
        return self._at_body_marker(hit.tag, hit.end)

    def _read_key(self, buf: str, pos: int) -> int:
        hit = self.read_until(buf, pos, self._key_markers, self._acc)
        if hit.tag is None:
            return hit.start
        self._params.start("".join(self._acc).strip())
        self.expect((VALUE_OPEN,), lambda: setattr(self, "_state", self._value))
        return hit.end

    def _value(self, buf: str, pos: int) -> int:
        end, done = self._params.scan(buf, pos)
        if done:
            self._state = self._body
        return end
