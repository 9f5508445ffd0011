"""mistral: Mistral / Mistral Small / Devstral / Magistral.

    old (pre-v11):  [TOOL_CALLS][{"name": "f", "arguments": {..}}, {"name": "g", "arguments": {..}}]
    v11+:           [TOOL_CALLS]f{..}[TOOL_CALLS]g{..}      (also f[ARGS]{..} and f[CALL_ID]abc123xyz[ARGS]{..})

There is no end marker: each call is ready when its object closes.  A ``[CALL_ID]`` is kept
as the call id; generated ids are 9 alphanumerics (Mistral chat templates reject others),
derived from (prefix, index) by a hash so they stay deterministic.
"""

from __future__ import annotations

import hashlib
import re

from workers.parser.core import NAME_MAX, T_CALL
from workers.parser.formats.envelope import Envelope
from workers.parser.scan import Markers, skip_ws
from workers.parser.states import FormatParser

TOOL_CALLS = "[TOOL_CALLS]"
ARGS, CALL_ID = "[ARGS]", "[CALL_ID]"
T_ARGS, T_ID = "args", "id"
_NAME = re.compile(r"[A-Za-z0-9_.\-]*")


class MistralParser(FormatParser):
    """``[TOOL_CALLS]`` followed by a JSON array, one object, or name + arguments."""

    FORMAT = "mistral"
    START_MARKERS = {TOOL_CALLS: T_CALL}
    STRAY_MARKERS = ("[/TOOL_CALLS]",)

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._name_markers = Markers({ARGS: T_ARGS, CALL_ID: T_ID})
        self._id_markers = Markers({ARGS: T_ARGS})
        self._acc: list[str] = []
        self._in_array = False

    def make_id(self, index: int) -> str:
        """9 alphanumeric characters, a pure function of (prefix, index)."""
        return hashlib.sha256(f"{self.call_id_prefix}{index}".encode()).hexdigest()[:9]

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        self._state = self._dispatch
        return end

    def _dispatch(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at >= len(buf):
            return at
        c = buf[at]
        if c == "[":
            self._in_array = True
            self._state = self._array_item
            return at + 1
        self.open_call()
        if c == "{":
            self._in_array = False
            return self._object_at(at)
        self._acc = []
        self._state = self._read_name
        return at

    # ------------------------------------------------------------------ JSON objects
    def _object_at(self, pos: int) -> int:
        self._env = Envelope(self)
        self._state = self._object
        return pos

    def _object(self, buf: str, pos: int) -> int:
        end, done = self.envelope_step(buf, pos)
        if done:
            self.ready()
            self._state = self._array_next if self._in_array else self._text
        return end

    def _array_item(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at >= len(buf):
            return at
        if buf[at] == "]":
            self._state = self._text
            return at + 1
        self.open_call()
        return self._object_at(at)

    def _array_next(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        if at >= len(buf):
            return at
        self._state = self._text
        if buf[at] == ",":
            self._state = self._array_item
            return at + 1
        return at + 1 if buf[at] == "]" else at

    # ------------------------------------------------------------------ name[ARGS]{...}
    def _read_name(self, buf: str, pos: int) -> int:
        end = _NAME.match(buf, pos).end()
        self._acc.append(buf[pos:end])
        self.call.raw.append(buf[pos:end])
        if end >= len(buf):
            return end
        self._name = "".join(self._acc)
        if not self._name or len(self._name) > NAME_MAX:
            self.recover(f"bad function name {self._name[:40]!r}")
            return end
        if buf[end] == "{":
            return self._named(None, end)
        hit = self._name_markers.match_at(buf, end)
        if hit is None:
            self.recover(f"unexpected {buf[end]!r} after the function name")
            return end
        if hit.tag is None:
            return end
        self.call.raw.append(buf[hit.start:hit.end])
        if hit.tag == T_ID:
            self._acc = []
            self._state = self._read_id
            return hit.end
        return self._named(None, hit.end)

    def _named(self, native_id: str | None, pos: int) -> int:
        self.name_call(self._name, native_id=native_id)
        self.json_body(self.ready_then_text)
        return pos

    def _read_id(self, buf: str, pos: int) -> int:
        end = _NAME.match(buf, pos).end()
        self._acc.append(buf[pos:end])
        self.call.raw.append(buf[pos:end])
        if end >= len(buf):
            return end
        call_id = "".join(self._acc)
        hit = self._id_markers.match_at(buf, end)
        if hit is None or len(call_id) > NAME_MAX:
            self.recover(f"bad call id {call_id[:40]!r}")
            return end
        if hit.tag is None:
            return end
        self.call.raw.append(buf[hit.start:hit.end])
        return self._named(call_id or None, hit.end)
