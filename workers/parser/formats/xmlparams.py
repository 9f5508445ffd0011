"""Parameter values written as bare text (qwen3_coder, minimax_m2, glm45) -> JSON argument fragments.

The arguments object is built as JSON text while the parameters arrive:

    <parameter=city>\\nParis\\n</parameter>   ->   {"city": "Paris"
    <parameter=days>\\n3\\n</parameter>        ->   , "days": 3
    </function>                              ->   }

A parameter whose schema type is exactly ``string`` streams character by character (escaped,
holding back one possible trailing newline); any other value is typed with the tool schema
(``schema.to_json``) when its close tag arrives.  With ``trim``, one leading and one trailing
newline of each value are template padding and dropped.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from workers.parser.scan import Markers
from workers.parser.schema import _types, json_string, to_json

if TYPE_CHECKING:
    from workers.parser.core import StreamParser

T_VALUE_END = "value_end"


def escape_piece(text: str) -> str:
    """``text`` escaped for the inside of a JSON string."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


class ParamWriter:
    """Turns the parameters of one call into argument fragments of ``parser``'s current call."""

    def __init__(self, parser: StreamParser, close: str, trim: bool) -> None:
        self.p = parser
        self.close = Markers({close: T_VALUE_END})
        self.trim = trim
        self.count = 0
        self.key = ""
        self.schema: dict | None = None
        self.stream = False
        self.first = True
        self.hold = ""
        self.acc: list[str] = []

    def open(self) -> None:
        """The call's name is known: the arguments object starts."""
        self.p.args("{")

    def start(self, key: str) -> None:
        """A parameter ``key`` starts; its value follows."""
        self.key = key
        self.schema = self.p.schemas.param(self.p.call.name, key)
        self.stream = _types(self.schema) == ["string"]
        self.first, self.hold, self.acc = True, "", []
        if self.stream:
            self.p.args(self._prefix() + '"')

    def _prefix(self) -> str:
        sep = ", " if self.count else ""
        self.count += 1
        return f"{sep}{json_string(self.key)}: "

    def scan(self, buf: str, pos: int) -> tuple[int, bool]:
        """Consume value text up to the close tag: (new pos, value complete)."""
        hit = self.close.find(buf, pos)
        piece = buf[pos:hit.start]
        self.p.call.raw.append(buf[pos:hit.end])
        if piece:
            self._piece(piece)
        if hit.tag is None:
            return hit.start, False
        self._end()
        return hit.end, True

    def _piece(self, piece: str) -> None:
        if self.first:
            self.first = False
            if self.trim and piece[0] == "\n":
                piece = piece[1:]
        text = self.hold + piece
        self.hold = ""
        if self.trim and text.endswith("\n"):
            text, self.hold = text[:-1], "\n"
        if not text:
            return
        if self.stream:
            self.p.args(escape_piece(text))
        else:
            self.acc.append(text)

    def _end(self) -> None:
        if self.stream:
            self.p.args('"')
        else:
            self.p.args(self._prefix() + to_json("".join(self.acc), self.schema))

    def close_object(self) -> None:
        """The call's parameters are complete."""
        self.p.args("}")
