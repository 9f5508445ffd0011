"""kimi_k2 (Kimi K2 / K2.5 / K2-Thinking) and kimi_k3 (Kimi K3's "XTML" channels).

    kimi_k2: <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{..}<|tool_call_end|><|tool_calls_section_end|>

The singular ``<|tool_call_section_begin|>`` spelling is accepted as well; native ids ``functions.NAME:IDX`` are kept.

    kimi_k3: <|open|>response<|sep|>text<|close|>response<|sep|>
             <|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>
               <|open|>argument key="K" type="string"<|sep|>raw text<|close|>argument<|sep|>
               <|open|>argument key="K" type="number"<|sep|>JSON<|close|>argument<|sep|>
             <|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>

K3's arguments are typed by their own ``type`` attribute: ``string`` (the default) is the raw text,
any other is JSON (text that is not JSON is kept as a string, as vLLM does).  A call may instead
hold one ``<|open|>json type="object"<|sep|>{..}<|close|>json<|sep|>`` block, the whole arguments
object (the chat template writes a call whose arguments are not an object that way).  Attribute
values are unescaped (``&quot;``, ``&amp;``).  The response wrappers, ``<|close|>message<|sep|>``
and ``<|end_of_msg|>`` are dropped; reasoning is the ``<|open|>think<|sep|>`` channel.  Facts from
vLLM 0.32's kimi_k3 tool and reasoning parsers and llama.cpp's Kimi-K3 template; no code taken.
"""

from __future__ import annotations

import re

from workers.parser.core import T_CLOSE
from workers.parser.formats.sections import SectionParser
from workers.parser.formats.xmlparams import escape_piece
from workers.parser.scan import Markers, json_error, skip_ws
from workers.parser.schema import json_string

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


SEP = "<|sep|>"
ARG_OPEN, ARG_CLOSE = "<|open|>argument ", "<|close|>argument" + SEP
JSON_OPEN, JSON_CLOSE = "<|open|>json", "<|close|>json" + SEP
T_ARG, T_JSON, T_SEP, T_VALUE_END = "argument", "json", "sep", "value_end"
_ATTR = re.compile(r'(\w+)="([^"]*)"')


def xtml_attrs(text: str) -> dict[str, str]:
    """``k="v"`` attributes of an XTML open tag, values unescaped."""
    return {m.group(1): m.group(2).replace("&quot;", '"').replace("&amp;", "&") for m in _ATTR.finditer(text)}


class KimiK3Parser(SectionParser):
    """Kimi K3: the head is the call's attributes (``tool``, ``index``); the body is argument elements."""

    FORMAT = "kimi_k3"
    SECTION_BEGIN = ("<|open|>tools" + SEP,)
    SECTION_END = ("<|close|>tools" + SEP,)
    CALL_BEGIN = "<|open|>call "
    CALL_END = "<|close|>call" + SEP
    HEAD_END = SEP
    STRAY_ALSO = ("<|open|>response" + SEP, "<|close|>response" + SEP, "<|close|>message" + SEP, "<|end_of_msg|>")

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._body_markers = Markers({ARG_OPEN: T_ARG, JSON_OPEN: T_JSON, self.CALL_END: T_CLOSE})
        self._sep = Markers({SEP: T_SEP})
        self._value_end = Markers({ARG_CLOSE: T_VALUE_END})
        self._count = 0          # arguments written in this call
        self._attrs: list[str] = []
        self._value: list[str] = []
        self._string = False

    def _on_head(self, head: str) -> None:
        name = xtml_attrs(head).get("tool", "").strip()
        if not name:
            self.recover(f"call has no tool attribute (head {head!r})")
            return
        self.name_call(name)
        self._count = 0
        self._state = self._arguments

    def _arguments(self, buf: str, pos: int) -> int:
        """Between arguments: another argument, a whole-object json block (first only), or the call's close."""
        at = skip_ws(buf, pos)
        self.call.raw.append(buf[pos:at])
        if at >= len(buf):
            return at
        hit = self._body_markers.match_at(buf, at)
        if hit is None or (hit.tag == T_JSON and self._count):
            self.recover("expected an argument or the call's close")
            return at
        if hit.tag is None:
            return at
        if hit.tag == T_CLOSE:
            if self._count:
                self.args("}")
            self.ready()
            self._state = self._section_ws
            return hit.end
        self.call.raw.append(buf[at:hit.end])
        self._attrs = []
        self._state = self._arg_head if hit.tag == T_ARG else self._json_head
        return hit.end

    def _arg_head(self, buf: str, pos: int) -> int:
        hit = self.read_until(buf, pos, self._sep, self._attrs)
        if hit.tag is None:
            return hit.start
        attrs = xtml_attrs("".join(self._attrs))
        if "key" not in attrs:
            self.recover("argument has no key attribute")
            return hit.end
        self._string = attrs.get("type", "string") == "string"
        self.args(("{" if not self._count else ", ") + json_string(attrs["key"]) + ": " + ('"' if self._string else ""))
        self._count += 1
        self._value = []
        self._state = self._arg_value
        return hit.end

    def _arg_value(self, buf: str, pos: int) -> int:
        hit = self._value_end.find(buf, pos)
        piece = buf[pos:hit.start]
        self.call.raw.append(piece)
        if piece and self._string:
            self.args(escape_piece(piece))
        elif piece:
            self._value.append(piece)
        if hit.tag is None:
            return hit.start
        self.call.raw.append(ARG_CLOSE)
        if self._string:
            self.args('"')
        else:
            text = "".join(self._value)
            value = text.strip()
            self.args(value if value and not json_error(value, want_object=False) else json_string(text))
        self._state = self._arguments
        return hit.end

    def _json_head(self, buf: str, pos: int) -> int:
        hit = self.read_until(buf, pos, self._sep, self._attrs)
        if hit.tag is None:
            return hit.start
        self.json_body(lambda: self.expect((JSON_CLOSE, self.CALL_END), self._json_done))
        return hit.end

    def _json_done(self) -> None:
        self.ready()
        self._state = self._section_ws
