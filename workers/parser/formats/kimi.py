"""kimi_k2 (Kimi K2 / K2.5 / K2-Thinking): native ids ``functions.NAME:IDX`` are kept.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{..}<|tool_call_end|><|tool_calls_section_end|>

The singular ``<|tool_call_section_begin|>`` spelling is accepted as well.
"""

from __future__ import annotations

import re

from workers.parser.formats.sections import SectionParser

_ID = re.compile(r"(?:functions\.)?([^\s:]+):(\d+)\Z")


class KimiK2Parser(SectionParser):
    """Kimi K2: the head is the native call id, from which the name is taken."""

    FORMAT = "kimi_k2"
    SECTION_BEGIN = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
    SECTION_END = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
    CALL_BEGIN = "<|tool_call_begin|>"
    CALL_END = "<|tool_call_end|>"
    HEAD_END = "<|tool_call_argument_begin|>"

    def _on_head(self, head: str) -> None:
        m = _ID.match(head)
        if m is None:
            self.recover(f"malformed call id {head!r} (expected functions.NAME:IDX)")
            return
        self.name_call(m.group(1), native_id=head)
        self._args_then_end()
