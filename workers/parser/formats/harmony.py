"""harmony: gpt-oss.  Messages are ``header<|message|>body<end>``; the turn is a sequence of them.

    <|channel|>analysis<|message|>think...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"SF"}<|call|>
    <|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>

A header with a recipient ``to=functions.NAME`` (on any channel, also ``analysis``, and also
written before ``<|channel|>``) makes the body a call's JSON arguments, ready at ``<|call|>``.
Otherwise ``analysis`` is reasoning and ``final``/``commentary`` are content.  The reasoning
option is ignored: channels carry it.
"""

from __future__ import annotations

import re

from workers.parser.core import NAME_MAX, T_CALL, T_CLOSE, T_DROP
from workers.parser.scan import Markers, skip_ws
from workers.parser.states import FormatParser

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
T_HEADER, T_MESSAGE, T_END = "header", "message", "end"
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
REASONING_CHANNELS = frozenset({"analysis"})


class HarmonyParser(FormatParser):
    """gpt-oss channels and ``to=functions.X`` calls."""

    FORMAT = "harmony"
    START_MARKERS = {START: T_CALL, CHANNEL: T_HEADER}
    STRAY_MARKERS = (END, CALL, RETURN, MESSAGE)
    RECOVER_MARKERS = {CALL: T_CLOSE, END: T_CLOSE, RETURN: T_CLOSE, START: T_CALL}

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.reasoning = None
        self._text_markers = Markers({**self.START_MARKERS, **{m: T_DROP for m in self.STRAY_MARKERS}})
        self._state = self._text
        self._header_markers = Markers({MESSAGE: T_MESSAGE, START: T_HEADER})
        self._body_markers = Markers({END: T_END, CALL: T_END, RETURN: T_END, START: T_HEADER, CHANNEL: T_HEADER})
        self._call_end = Markers({CALL: T_END, END: T_END, RETURN: T_END})
        self._header: list[str] = []
        self._to_reasoning = False

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        self._header = [buf[start:end]] if tag == T_HEADER else []
        self._hlen = 0
        self._state = self._read_header
        return end

    # ------------------------------------------------------------------ headers
    def _read_header(self, buf: str, pos: int) -> int:
        hit = self._header_markers.find(buf, pos)
        self._hlen += hit.start - pos
        if self._hlen <= NAME_MAX:
            self._header.append(buf[pos:hit.start])
        if hit.tag is None:
            return hit.start
        if hit.tag == T_HEADER:
            self._header, self._hlen = [], 0
            return hit.end
        self._open_message("".join(self._header) if self._hlen <= NAME_MAX else "")
        return hit.end

    def _open_message(self, header: str) -> None:
        recipient = _RECIPIENT.search(header)
        if recipient is not None:
            self._open_call(recipient.group(1))
            return
        channel = _CHANNEL.search(header)
        self._to_reasoning = channel is not None and channel.group(1) in REASONING_CHANNELS
        self._state = self._message_body

    def _open_call(self, recipient: str) -> None:
        name = recipient.removeprefix("functions.")
        self.open_call()
        self.name_call(name)
        self.json_body(self._await_call_end)

    # ------------------------------------------------------------------ bodies
    def _message_body(self, buf: str, pos: int) -> int:
        hit = self._body_markers.find(buf, pos)
        text = buf[pos:hit.start]
        self.reason(text) if self._to_reasoning else self.content(text)
        if hit.tag is None:
            return hit.start
        if hit.tag == T_END:
            self._state = self._text
            return hit.end
        return self._on_call_marker(hit.tag, buf, hit.start, hit.end)

    def _await_call_end(self) -> None:
        self._state = self._call_end_state

    def _call_end_state(self, buf: str, pos: int) -> int:
        at = skip_ws(buf, pos)
        self.call.raw.append(buf[pos:at])
        if at >= len(buf):
            return at
        hit = self._call_end.match_at(buf, at)
        if hit is None:
            self.recover(f"unexpected {buf[at]!r} after the call arguments")
            return at
        if hit.tag is None:
            return at
        self.ready_then_text()
        return hit.end

    def _at_eof(self, held: str) -> None:
        if self._state == self._message_body:
            self.reason(held) if self._to_reasoning else self.content(held)
        elif self._state == self._read_header:
            self._state = self._text  # an unfinished header is markup
        else:
            super()._at_eof(held)
