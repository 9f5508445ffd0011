"""minimax_m3 (MiniMax-M3): every structural tag behind the ``]<]minimax[>[`` marker (NS below).

    NS<tool_call>\\n
    NS<invoke name="NAME">NS<city>Paris NS</city>NS<tags>NS<item>a NS</item>NS</tags>NS</invoke>\\n
    NS</tool_call>

Each invoke is one call, ready at its ``NS</invoke>``.  A parameter is an element named after the
argument; an element holding elements is an object, or an array where the schema says so
(``elements``).  A parameter whose schema type is exactly ``string`` streams as it arrives; any
other is written out when its element closes.  ``name="N"``, ``name='N'`` and ``name=N`` are read.

    tag at a position     NS "<" ["/"] name ">"      (name up to NAME_MAX characters)
    states                text -> block (an invoke tag) -> invoke (parameters) -> element (text and
                          child tags, a stack) -> invoke ... NS</invoke> -> after (another invoke,
                          NS</tool_call>, or anything else: content)

Malformed (recovered to ``NS</invoke>``, invalid): a close tag that is not the open element's, text
between parameters, a top-level parameter given twice (vLLM would make it a list: streamed
parameters cannot be taken back), an element inside a string parameter, text beside child
elements, nesting past ``MAX_DEPTH``.  A stray ``</mm:think>`` (the template writes one before an
answer given without thinking) is dropped.  Facts from vLLM 0.32's ``vllm/parser/minimax_m3.py``,
its MiniMax-M3 reasoning parser and MiniMax-M3's chat template; no code taken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runtime.reasoning_markers import think_markers
from workers.parser.core import NAME_MAX, T_CALL, T_CLOSE
from workers.parser.formats.elements import Element, ElementError, element_json
from workers.parser.formats.xmlparams import escape_piece
from workers.parser.scan import MAYBE_AT, NO_MATCH, Markers, match_literal, skip_ws
from workers.parser.schema import _types, json_string
from workers.parser.states import FormatParser

NS = "]<]minimax[>["
BLOCK_OPEN, BLOCK_CLOSE = NS + "<tool_call>", NS + "</tool_call>"
INVOKE = "invoke"
MAX_DEPTH = 128
T_BLOCK_END = "block_end"
T_NS = "ns"
_INVOKE_NAME = re.compile(r"invoke\s+name=(\"[^\"]*\"|'[^']*'|[^\s\"'>]*)\s*\Z")


@dataclass(frozen=True, slots=True)
class Tag:
    """``NS<name>`` or ``NS</name>`` (``closing``), ending at ``end``."""

    closing: bool
    name: str
    end: int


MORE = Tag(False, "", -1)  # the text so far may still become a tag: hold it


def tag_at(buf: str, at: int) -> Tag | None:
    """The tag at ``at``; ``MORE`` when the text may still become one; None when it is not one."""
    start = match_literal(buf, at, NS + "<")
    if start == MAYBE_AT:
        return MORE
    if start == NO_MATCH:
        return None
    gt = buf.find(">", start, start + NAME_MAX + 2)
    if gt < 0:
        return MORE if len(buf) - start <= NAME_MAX + 1 else None
    body = buf[start:gt]
    closing = body.startswith("/")
    return Tag(closing, body[1:] if closing else body, gt + 1)


def invoke_name(tag: Tag) -> str | None:
    """The function name of an invoke tag (quoted either way, or bare); None if it is not one."""
    m = None if tag.closing else _INVOKE_NAME.match(tag.name)
    if m is None:
        return None
    name = m.group(1)
    return (name[1:-1] if name[:1] in "\"'" else name).strip()


class MiniMaxM3Parser(FormatParser):
    """MiniMax-M3 namespaced XML calls (module doc)."""

    FORMAT = "minimax_m3"
    START_MARKERS = {BLOCK_OPEN: T_CALL}
    STRAY_MARKERS = (BLOCK_CLOSE, think_markers("minimax_m3")[1])
    RECOVER_MARKERS = {NS + "</invoke>": T_CLOSE, BLOCK_CLOSE: T_BLOCK_END, BLOCK_OPEN: T_CALL}

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._ns = Markers({NS: T_NS})
        self._stack: list[Element] = []
        self._keys: set[str] = set()
        self._stream = False
        self._ws: list[str] = []

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        self.open_call()
        self.call.raw.append(buf[start:end])
        self._state = self._block
        return end

    def _after_recovery(self, tag: str):
        if tag == T_CLOSE:
            self._ws = []
            return self._after
        return self._text

    # ------------------------------------------------------------------ invokes
    def _block(self, buf: str, pos: int) -> int:
        """After ``NS<tool_call>``: whitespace, then the first invoke."""
        at = skip_ws(buf, pos)
        if at >= len(buf):
            self.call.raw.append(buf[pos:at])
            return at
        tag = tag_at(buf, at)
        name = invoke_name(tag) if tag is not None and tag is not MORE else None
        self.call.raw.append(buf[pos:at] if name is None else buf[pos:tag.end])
        if tag is MORE:
            return at
        if name is None:
            self.recover("expected an invoke tag")
            return at
        return self._invoke(name, tag.end)

    def _invoke(self, name: str, end: int) -> int:
        if not name:
            self.recover("empty function name")
            return end
        self.name_call(name)
        self.args("{")
        self._keys = set()
        self._state = self._params
        return end

    def _after(self, buf: str, pos: int) -> int:
        """After an invoke: another invoke, the block close, or content (the whitespace kept)."""
        at = skip_ws(buf, pos)
        self._ws.append(buf[pos:at])
        if at >= len(buf):
            return at
        tag = tag_at(buf, at)
        if tag is MORE:
            return at
        if tag is not None and tag.closing and tag.name == "tool_call":
            self._state = self._text
            return tag.end
        name = invoke_name(tag) if tag is not None else None
        if name is None:
            self.content("".join(self._ws))
            self._state = self._text
            return at
        self.open_call()
        self.call.raw.append(buf[at:tag.end])
        return self._invoke(name, tag.end)

    # ------------------------------------------------------------------ parameters
    def _params(self, buf: str, pos: int) -> int:
        """Inside an invoke, between parameters: a parameter's open tag or ``NS</invoke>``."""
        at = skip_ws(buf, pos)
        self.call.raw.append(buf[pos:at])
        if at >= len(buf):
            return at
        tag = tag_at(buf, at)
        if tag is MORE:
            return at
        if tag is None or (tag.closing and tag.name != INVOKE):
            self.recover("expected a parameter tag or the invoke's close")
            return at
        self.call.raw.append(buf[at:tag.end])
        if tag.closing:
            self.args("}")
            self.ready()
            self._ws = []
            self._state = self._after
        else:
            self._start_param(tag.name)
        return tag.end

    def _start_param(self, key: str) -> None:
        if key in self._keys:
            self.recover(f"parameter {key!r} given twice")
            return
        self._keys.add(key)
        self._stack = [Element(key)]
        self._stream = _types(self.schemas.param(self.call.name, key)) == ["string"]
        if self._stream:
            self.args(self._prefix(key) + '"')
        self._state = self._element

    def _prefix(self, key: str) -> str:
        return (", " if len(self._keys) > 1 else "") + json_string(key) + ": "

    # ------------------------------------------------------------------ one parameter's elements
    def _element(self, buf: str, pos: int) -> int:
        """Element text up to the next tag, then that tag (a child opens, the open element closes)."""
        hit = self._ns.find(buf, pos)
        piece = buf[pos:hit.start]
        self.call.raw.append(piece)
        if piece:
            self._text_piece(piece)
        if hit.tag is None:
            return hit.start
        tag = tag_at(buf, hit.start)
        if tag is MORE:
            return hit.start
        top = self._stack[-1]
        if tag is None or (tag.closing and tag.name != top.name):
            self.recover(f"expected {NS}</{top.name}>")
            return hit.start
        if not tag.closing and (self._stream or len(self._stack) >= MAX_DEPTH):
            self.recover(f"element <{tag.name}> inside string parameter {top.name!r}" if self._stream
                         else f"elements nested deeper than {MAX_DEPTH}")
            return hit.start
        self.call.raw.append(buf[hit.start:tag.end])
        if tag.closing:
            self._close_element()
        else:
            self._stack.append(Element(tag.name))
        return tag.end

    def _text_piece(self, piece: str) -> None:
        if self._stream:
            self.args(escape_piece(piece))
        else:
            self._stack[-1].text.append(piece)

    def _close_element(self) -> None:
        el = self._stack.pop()
        if self._stack:
            self._stack[-1].children.append(el)
            return
        self._state = self._params
        if self._stream:
            self.args('"')
            return
        try:
            value = element_json(el, self.schemas.param(self.call.name, el.name))
        except ElementError as exc:
            self.recover(str(exc))
            return
        self.args(self._prefix(el.name) + value)

    def _at_eof_in_call(self, held: str) -> None:
        if self._state == self._after:
            self.content("".join(self._ws))
        super()._at_eof_in_call(held)
