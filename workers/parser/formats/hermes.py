"""hermes: Hermes 2/3, Qwen2.5, QwQ, Qwen3 (non-coder).

    narration<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>\\n<tool_call>...

Each call is one JSON object between ``<tool_call>`` and ``</tool_call>``; the name is sent as
soon as its string closes, the arguments stream as the model writes them, and the call is
ready the moment ``</tool_call>`` arrives.  Markers inside JSON strings are argument text.
"""

from __future__ import annotations

from workers.parser.core import T_CALL, T_CLOSE
from workers.parser.formats.envelope import Envelope
from workers.parser.states import FormatParser

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


class HermesParser(FormatParser):
    """``<tool_call>{json}</tool_call>`` calls."""

    FORMAT = "hermes"
    START_MARKERS = {OPEN: T_CALL}
    STRAY_MARKERS = (CLOSE,)
    RECOVER_MARKERS = {CLOSE: T_CLOSE, OPEN: T_CALL}

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        self.open_call()
        self._env = Envelope(self)
        self._state = self._object
        return end

    def _object(self, buf: str, pos: int) -> int:
        end, done = self.envelope_step(buf, pos)
        if done:
            self.expect((CLOSE,), self.ready_then_text)
        return end
