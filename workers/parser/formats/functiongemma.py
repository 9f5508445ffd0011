"""functiongemma: Google's FunctionGemma (Gemma 3 270M tuned for function calling).

    text<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>
                             ^head ^name      ^arguments in Gemma's notation (gemmaargs)      ^ready

Read from vLLM 0.32's ``functiongemma_tool_parser.py``, Google's FunctionGemma formatting guide and
the checkpoint's template: each call sits between ``<start_function_call>`` and
``<end_function_call>`` (added tokens), its head is ``call:`` + name, its arguments are ``{key:value,...}``
with every string between two ``<escape>`` tokens.  Parallel calls follow one another.  After its
calls the model writes ``<start_function_response>`` (a stop token): like a stray
``<end_function_call>`` it is dropped from text.  A malformed call is skipped to its
``<end_function_call>``; a call the stream cuts before that marker is truncated, even when its
arguments closed.  The family writes no reasoning span: ``<think>`` when reasoning is on.
"""

from __future__ import annotations

import re

from workers.parser.core import T_CALL, T_CLOSE
from workers.parser.formats.gemmaargs import GemmaArgs
from workers.parser.scan import Markers
from workers.parser.states import FormatParser

START, END = "<start_function_call>", "<end_function_call>"
RESPONSE = "<start_function_response>"
QUOTE = "<escape>"
HEAD = "call:"
T_ARGS = "args"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\Z")


class FunctionGemmaParser(FormatParser):
    """``<start_function_call>call:NAME{...}<end_function_call>`` calls."""

    FORMAT = "functiongemma"
    START_MARKERS = {START: T_CALL}
    STRAY_MARKERS = (END, RESPONSE)
    RECOVER_MARKERS = {END: T_CLOSE, START: T_CALL}
    QUOTE = QUOTE

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._name_markers = Markers({"{": T_ARGS, END: T_CLOSE})
        self._head: list[str] = []
        self._args: GemmaArgs | None = None

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        self.open_call()
        self.expect((HEAD,), self._start_name)
        return end

    def _start_name(self) -> None:
        self._head = []
        self._state = self._read_name

    def _read_name(self, buf: str, pos: int) -> int:
        hit = self.read_until(buf, pos, self._name_markers, self._head)
        if hit.tag is None:
            return hit.start
        name = "".join(self._head).strip()
        if hit.tag == T_CLOSE:
            self.call.raw.pop()  # the end marker is not part of the raw call text
            self.invalid(f"call {name[:40]!r} has no arguments")
            self._state = self._text
        elif NAME.match(name) is None:
            self.recover(f"bad function name {name[:40]!r}")
        else:
            self.name_call(name)
            self._args = GemmaArgs(self, self.QUOTE)
            self._args.open()
            self._state = self._arguments
        return hit.end

    def _arguments(self, buf: str, pos: int) -> int:
        end = self._args.scan(buf, pos)
        self.call.raw.append(buf[pos:end])
        if self._args.error:
            self.recover(self._args.error)
        elif self._args.done:
            self.expect((END,), self._call_done)
        return end

    def _call_done(self) -> None:
        self.call.raw.pop()
        self.ready_then_text()
