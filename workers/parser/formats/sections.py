"""Special-token section formats: deepseek_v3, deepseek_v31, kimi_k2, kimi_k3 share this shape.

    text <SECTION_BEGIN> <CALL_BEGIN> head <HEAD_END> {json} <CALL_END> ... <SECTION_END> text

The head (name, or type+name, or a native id, or attributes) is read up to ``HEAD_END``; the
arguments are one JSON value streamed by the shared scanner (kimi_k3: argument elements);
``CALL_END`` makes the call ready.  A call
begin without a section begin is accepted too.  Inside a section, whitespace after a marker
is dropped and any other stray text is content.
"""

from __future__ import annotations

from workers.parser.core import T_CALL, T_CLOSE
from workers.parser.scan import Markers
from workers.parser.states import FormatParser

T_SECTION = "section"
T_SECTION_END = "section_end"
T_HEAD_END = "head_end"


class SectionParser(FormatParser):
    """Base of the section formats; subclasses set the markers and ``_on_head``."""

    SECTION_BEGIN: tuple[str, ...] = ()
    SECTION_END: tuple[str, ...] = ()
    CALL_BEGIN = ""
    CALL_END = ""
    HEAD_END = ""
    STRAY_ALSO: tuple[str, ...] = ()  # other markup dropped outside a call

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        if cls.CALL_BEGIN:
            cls.START_MARKERS = {**{m: T_SECTION for m in cls.SECTION_BEGIN}, cls.CALL_BEGIN: T_CALL}
            cls.STRAY_MARKERS = (*cls.SECTION_END, cls.CALL_END, *cls.STRAY_ALSO)
            cls.RECOVER_MARKERS = {cls.CALL_END: T_CLOSE, cls.CALL_BEGIN: T_CALL,
                                   **{m: T_SECTION_END for m in cls.SECTION_END}}

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._section_markers = Markers({self.CALL_BEGIN: T_CALL, **{m: T_SECTION_END for m in self.SECTION_END}})
        self._head_markers = Markers({self.HEAD_END: T_HEAD_END, self.CALL_END: T_CLOSE})
        self._head: list[str] = []

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        if tag == T_SECTION:
            self._state = self._section_ws
            return end
        self.open_call()
        self._head = []
        self._state = self._read_head
        return end

    def _after_recovery(self, tag: str):
        return self._text if tag == T_SECTION_END else self._section_ws

    # ------------------------------------------------------------------ inside a section
    def _section_ws(self, buf: str, pos: int) -> int:
        end = pos
        while end < len(buf) and buf[end] in " \t\r\n":
            end += 1
        if end < len(buf):
            self._state = self._section
        return end

    def _section(self, buf: str, pos: int) -> int:
        hit = self._section_markers.find(buf, pos)
        self.content(buf[pos:hit.start])
        if hit.tag is None:
            return hit.start
        if hit.tag == T_SECTION_END:
            self._state = self._text
            return hit.end
        return self._on_call_marker(hit.tag, buf, hit.start, hit.end)

    # ------------------------------------------------------------------ one call
    def _read_head(self, buf: str, pos: int) -> int:
        hit = self.read_until(buf, pos, self._head_markers, self._head)
        if hit.tag is None:
            return hit.start
        head = "".join(self._head)
        if hit.tag == T_CLOSE:
            self.call.raw.pop()
            self.invalid(f"call has no arguments (header {head!r})")
            self._state = self._section_ws
            return hit.end
        self._on_head(head.strip())
        return hit.end

    def _on_head(self, head: str) -> None:
        """The call header is complete: name the call and set the next state."""
        raise NotImplementedError

    def _args_then_end(self) -> None:
        self.json_body(lambda: self.expect((self.CALL_END,), self._call_done))

    def _call_done(self) -> None:
        self.call.raw.pop()  # the end marker is not part of the raw call text
        self.ready()
        self._state = self._section_ws
