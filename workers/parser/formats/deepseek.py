"""deepseek_v3 (V3-0324, R1-0528) and deepseek_v31 (V3.1).

    v3:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{..}\\n```<｜tool▁call▁end｜>
    v31: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{..}<｜tool▁call▁end｜>
    both end the section with <｜tool▁calls▁end｜>.
"""

from __future__ import annotations

from workers.parser.scan import MAYBE_AT, NO_MATCH, match_literal, skip_ws
from workers.parser.formats.sections import SectionParser

FENCE = "```"


class DeepSeekV31Parser(SectionParser):
    """DeepSeek V3.1: the head is the function name."""

    FORMAT = "deepseek_v31"
    SECTION_BEGIN = ("<｜tool▁calls▁begin｜>",)
    SECTION_END = ("<｜tool▁calls▁end｜>",)
    CALL_BEGIN = "<｜tool▁call▁begin｜>"
    CALL_END = "<｜tool▁call▁end｜>"
    HEAD_END = "<｜tool▁sep｜>"

    def _on_head(self, head: str) -> None:
        if not head:
            self.recover("empty function name")
            return
        self.name_call(head)
        self._args_then_end()


class DeepSeekV3Parser(DeepSeekV31Parser):
    """DeepSeek V3 / R1: the head is the call type; the name line and a json fence follow."""

    FORMAT = "deepseek_v3"

    def _on_head(self, head: str) -> None:
        self._name: list[str] = []
        self._state = self._read_name

    def _read_name(self, buf: str, pos: int) -> int:
        nl = buf.find("\n", pos)
        end = len(buf) if nl < 0 else nl
        piece = buf[pos:end]
        if "<" in piece:  # a marker where the name line should end
            self.recover("no newline after the function name")
            return pos
        self._name.append(piece)
        self.call.raw.append(buf[pos:end + 1] if nl >= 0 else piece)
        if nl < 0:
            return end
        name = "".join(self._name).strip()
        if not name:
            self.recover("empty function name")
            return nl + 1
        self.name_call(name)
        self._state = self._fence_or_json
        return nl + 1

    def _fence_or_json(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        self.call.raw.append(buf[pos:at])
        if at >= len(buf):
            return at
        if buf[at] == "{":
            self._args_then_end()
            return at
        end = match_literal(buf, at, FENCE + "json")
        if end == MAYBE_AT:
            return at
        if end == NO_MATCH:
            self.recover(f"expected a json fence, got {buf[at]!r}")
            return at
        self.call.raw.append(FENCE + "json")
        self.json_body(lambda: self.expect((FENCE, self.CALL_END), self._call_done))
        return end
