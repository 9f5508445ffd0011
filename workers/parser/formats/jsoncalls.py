"""JSON-call families: one base for every format whose calls are JSON objects behind a marker.

    single  OPEN {call} CLOSE?                    hermes, longcat, ernie45, internlm, gigachat3
    list    OPEN? [{call}, {call}] CLOSE?         jamba, hunyuan_a13b, cohere_command, granite, phi4_mini_json, apertus, xlam
    lines   OPEN {call}\\n{call}\\n CLOSE           minimax_m1

A family is a subclass naming its markers, its layout and (where they differ) its keys; each
family module's docstring names the model and the parser its markup was read from.  Calls are
parsed by ``Envelope``: the name is sent when its string closes, the arguments stream as the
model writes them, and each call is ready when its object closes.  Markers inside JSON strings
are argument text.  A family without a close marker ends its block at the list's ``]``; a
malformed call there is reported at once (there is no close marker to skip to).
"""

from __future__ import annotations

from workers.parser.core import T_CALL, T_CLOSE
from workers.parser.formats.envelope import ARG_KEYS, NAME_KEYS, Envelope
from workers.parser.scan import MAYBE_AT, NO_MATCH, match_literal, skip_ws
from workers.parser.states import FormatParser

SINGLE, LIST, LINES = "single", "list", "lines"


class JsonCallsParser(FormatParser):
    """Calls as JSON objects after ``OPEN``: one, a JSON list, or one per line, up to ``CLOSE``."""

    OPEN = ""
    OPEN_ALSO: tuple[str, ...] = ()  # other spellings of OPEN
    CLOSE = ""  # "" when the block has no close marker (it ends with its list)
    STRAY_ALSO: tuple[str, ...] = ()  # template markers dropped from text
    LAYOUT = SINGLE
    BARE_ALSO = False  # a list family that also reads one bare object after OPEN as one call
    NAME_KEYS = NAME_KEYS
    ARG_KEYS = ARG_KEYS
    ENVELOPE: type[Envelope] = Envelope

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        cls.START_MARKERS = {m: T_CALL for m in (cls.OPEN, *cls.OPEN_ALSO) if m}
        cls.STRAY_MARKERS = ((cls.CLOSE,) if cls.CLOSE else ()) + cls.STRAY_ALSO
        cls.RECOVER_MARKERS = {cls.CLOSE: T_CLOSE, **cls.START_MARKERS} if cls.CLOSE else {}

    _bare = False  # this block is one bare object (``BARE_ALSO``), not a list

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        self._state = self._list_open if self.LAYOUT == LIST else self._item
        self._bare = False
        return end

    # ------------------------------------------------------------------ the block
    def _list_open(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at >= len(buf):
            return pos  # held: without a list the marker and this whitespace are text
        if buf[at] == "{" and self.BARE_ALSO:
            self._bare = True
            self._state = self._item
            return at
        if buf[at] != "[":
            if not self.CLOSE:  # a bare marker word in prose (phi4's ``functools``) is text
                self.content(self.OPEN)
                self._state = self._text
                return pos
            return self._malformed(f"expected '[', got {buf[at]!r}", at)
        self._state = self._item
        return at + 1

    def _item(self, buf: str, pos: int) -> int:
        """The next call object (or, in a list, its end)."""
        at = skip_ws(buf, pos)
        if at >= len(buf):
            return at
        if buf[at] == "{":
            self.open_call()
            self._env = self.ENVELOPE(self, self.NAME_KEYS, self.ARG_KEYS)
            self._state = self._object
            return at
        if buf[at] == "]" and self.LAYOUT == LIST:
            return self._block_end(at + 1)
        if self.LAYOUT == LINES and self._close_at(buf, at) != NO_MATCH:
            return self._between(buf, at)
        return self._malformed(f"expected a call object, got {buf[at]!r}", at)

    def _object(self, buf: str, pos: int) -> int:
        end, done = self.envelope_step(buf, pos)
        if done:
            if (self.LAYOUT == SINGLE or self._bare) and self.CLOSE:
                self.expect((self.CLOSE,), self.ready_then_text)
            elif self.LAYOUT == SINGLE or self._bare:
                self.ready_then_text()
            else:
                self.ready()
                self._state = self._between
        return end

    def _between(self, buf: str, pos: int) -> int:
        """After a call in a list (``,`` or ``]``) or in lines (another object or the close)."""
        at = skip_ws(buf, pos)
        if at >= len(buf):
            return at
        c = buf[at]
        if self.LAYOUT == LIST:
            if c == ",":
                self._state = self._item
                return at + 1
            if c == "]":
                return self._block_end(at + 1)
            return self._malformed(f"expected ',' or ']' between calls, got {c!r}", at)
        if c == "{":
            self._state = self._item
            return at
        end = self._close_at(buf, at)
        if end == MAYBE_AT:
            return at
        if end == NO_MATCH:
            return self._malformed(f"expected a call object or {self.CLOSE!r}, got {c!r}", at)
        self._state = self._text
        return end

    def _close_at(self, buf: str, at: int) -> int:
        return match_literal(buf, at, self.CLOSE)

    def _block_end(self, pos: int) -> int:
        """The list closed: the close marker follows, or (without one) text."""
        self._state = self._closing if self.CLOSE else self._text
        return pos

    def _closing(self, buf: str, pos: int) -> int:
        """Whitespace and the close marker after a list (dropped); anything else is text again."""
        at = skip_ws(buf, pos)
        end = self._close_at(buf, at) if at < len(buf) else MAYBE_AT
        if end == MAYBE_AT:
            return pos
        self._state = self._text
        return pos if end == NO_MATCH else end

    def _malformed(self, error: str, at: int) -> int:
        """Markup that is no call where one must be: an (unnamed) invalid call, skipped like the others."""
        if self.call is None:
            self.open_call()
        self.recover(error)
        return at
