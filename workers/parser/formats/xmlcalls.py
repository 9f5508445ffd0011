"""XML-style calls with named parameters: qwen3_coder (Qwen3-Coder, Qwen3.5+) and minimax_m2.

    qwen3_coder: <tool_call>\\n<function=NAME>\\n<parameter=K>\\nV\\n</parameter>\\n</function>\\n</tool_call>
    minimax_m2:  <minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="K">V</parameter>\\n</invoke>\\n</minimax:tool_call>

A block may hold several invokes; each is its own call, ready at its invoke close tag.
qwen3_coder also accepts a bare ``<function=...>`` without the wrapper.  Values are typed by
the tool schema (see ``xmlparams``).
"""

from __future__ import annotations

from collections.abc import Callable

from workers.parser.core import T_CALL, T_CLOSE
from workers.parser.scan import Markers, skip_ws
from workers.parser.states import FormatParser
from workers.parser.formats.xmlparams import ParamWriter

T_INVOKE = "invoke"
T_BLOCK_END = "block_end"
T_PARAM = "param"
T_INVOKE_END = "invoke_end"
T_NAME_END = "name_end"


class XmlCallParser(FormatParser):
    """Base of the XML-parameter formats; subclasses set the tags."""

    BLOCK_OPEN = ""
    BLOCK_CLOSE = ""
    INVOKE_OPEN = ""
    INVOKE_CLOSE = ""
    PARAM_OPEN = ""
    PARAM_CLOSE = ""
    NAME_END = ""
    BARE_INVOKE = False
    TRIM = True

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        cls.START_MARKERS = {cls.BLOCK_OPEN: T_CALL}
        if cls.BARE_INVOKE:
            cls.START_MARKERS[cls.INVOKE_OPEN] = T_INVOKE
        cls.STRAY_MARKERS = (cls.BLOCK_CLOSE,)
        cls.RECOVER_MARKERS = {cls.INVOKE_CLOSE: T_CLOSE, cls.BLOCK_CLOSE: T_BLOCK_END, cls.BLOCK_OPEN: T_CALL}

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._name_end = Markers({self.NAME_END: T_NAME_END})
        self._in_invoke = Markers({self.PARAM_OPEN: T_PARAM, self.INVOKE_CLOSE: T_INVOKE_END})
        self._after = Markers({self.BLOCK_CLOSE: T_BLOCK_END, self.INVOKE_OPEN: T_INVOKE})
        self._name: list[str] = []
        self._params: ParamWriter | None = None

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        self.open_call()
        self.call.raw.append(buf[start:end])
        if tag == T_CALL:
            self.expect((self.INVOKE_OPEN,), self._start_name)
        else:
            self._start_name()
        return end

    def _after_recovery(self, tag: str):
        if tag == T_CLOSE:
            self._ws = []
            return self._after_invoke
        return self._text

    # ------------------------------------------------------------------ names
    def _start_name(self, then: Callable[[str], None] | None = None) -> None:
        """Read a name up to ``NAME_END``; then ``then(name)`` (default: name the call)."""
        self._name = []
        self._name_then = then or self._named
        self._state = self._read_name

    def _read_name(self, buf: str, pos: int) -> int:
        hit = self.read_until(buf, pos, self._name_end, self._name)
        if hit.tag is None:
            return hit.start
        name = "".join(self._name).strip()
        if not name:
            self.recover("empty name")
            return hit.end
        self._name_then(name)
        return hit.end

    def _named(self, name: str) -> None:
        self.name_call(name)
        self._params = ParamWriter(self, self.PARAM_CLOSE, self.TRIM)
        self._params.open()
        self._state = self._invoke_body

    # ------------------------------------------------------------------ parameters
    def _invoke_body(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        self.call.raw.append(buf[pos:at])
        if at >= len(buf):
            return at
        hit = self._in_invoke.match_at(buf, at)
        if hit is None:
            self.recover(f"unexpected {buf[at]!r} between parameters")
            return at
        if hit.tag is None:
            return at
        self.call.raw.append(buf[hit.start:hit.end])
        if hit.tag == T_PARAM:
            self._start_name(self._param_named)
            return hit.end
        self._params.close_object()
        self.ready()
        self._ws: list[str] = []
        self._state = self._after_invoke
        return hit.end

    def _param_named(self, key: str) -> None:
        self._params.start(key)
        self._state = self._value

    def _value(self, buf: str, pos: int) -> int:
        end, done = self._params.scan(buf, pos)
        if done:
            self._state = self._invoke_body
        return end

    # ------------------------------------------------------------------ between invokes
    def _after_invoke(self, buf: str, pos: int) -> int:
        """After an invoke: the block close or another invoke; other text is content, whitespace kept."""
        at = skip_ws(buf, pos)
        self._ws.append(buf[pos:at])
        if at >= len(buf):
            return at
        hit = self._after.match_at(buf, at)
        if hit is None:
            self.content("".join(self._ws))
            self._state = self._text
            return at
        if hit.tag is None:
            return at
        if hit.tag == T_BLOCK_END:
            self._state = self._text
            return hit.end
        self.open_call()
        self.call.raw.append(buf[hit.start:hit.end])
        self._start_name()
        return hit.end

    def _at_eof_in_call(self, held: str) -> None:
        if self._state == self._after_invoke:
            self.content("".join(self._ws))
        super()._at_eof_in_call(held)


class Qwen3CoderParser(XmlCallParser):
    """Qwen3-Coder / Qwen3.5 XML calls."""

    FORMAT = "qwen3_coder"
    BLOCK_OPEN, BLOCK_CLOSE = "<tool_call>", "</tool_call>"
    INVOKE_OPEN, INVOKE_CLOSE = "<function=", "</function>"
    PARAM_OPEN, PARAM_CLOSE = "<parameter=", "</parameter>"
    NAME_END = ">"
    BARE_INVOKE = True


class MiniMaxM2Parser(XmlCallParser):
    """MiniMax-M2 / M2.1 / M2.5 XML calls."""

    FORMAT = "minimax_m2"
    BLOCK_OPEN, BLOCK_CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
    INVOKE_OPEN, INVOKE_CLOSE = '<invoke name="', "</invoke>"
    PARAM_OPEN, PARAM_CLOSE = '<parameter name="', "</parameter>"
    NAME_END = '">'
