"""gemma4: Google Gemma 4 ``<|tool_call>call:name{key:value,...}<tool_call|>``, read as vLLM 0.32's
``vllm/parser/gemma4.py`` and llama.cpp's Gemma 4 grammar read it, and as the checkpoint's template writes it.

    <|channel>thought\\n...<channel|>Text<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>
    ^ reasoning span (runtime.reasoning_markers)   ^ header to '{'  ^ bare key ^ string       ^ bare value

Arguments are Gemma's notation with ``<|"|>`` as the quote, read by ``gemmaargs.GemmaArgs`` (the
reader FunctionGemma's parser uses): turned into JSON as they arrive, so arguments stream.  The call
is ready at its object's closing ``}`` (``<tool_call|>`` after it is dropped as stray markup, and a
model that ends the turn there instead, as vLLM notes some do, loses no call).  Arguments the reader
refuses -- a missing ``:`` or ``,``, a bracket that does not match, markup before the object closed --
make the call invalid; it is skipped to ``<tool_call|>`` (or the next ``<|tool_call>``).
``call:name<tool_call|>`` (no object) is a call without arguments; ``:name{`` (no ``call``) is read
too, as vLLM reads it.
"""

from __future__ import annotations

import re

from workers.parser.core import T_CALL, T_CLOSE
from workers.parser.formats.gemmaargs import GemmaArgs
from workers.parser.scan import Markers
from workers.parser.states import FormatParser

OPEN, CLOSE = "<|tool_call>", "<tool_call|>"
TOOL_RESPONSE = "<|tool_response>"  # what the template writes after a turn's calls (dropped from text)
DELIM = '<|"|>'  # opens and closes a string
T_ARGS = "args"
_HEADER = Markers({"{": T_ARGS, CLOSE: T_CLOSE, OPEN: T_CALL})
_NAME = re.compile(r"(?:call)?:\s*(\S+)")


class Gemma4Parser(FormatParser):
    """``<|tool_call>call:name{...}<tool_call|>`` calls with Gemma 4's argument syntax."""

    FORMAT = "gemma4"
    START_MARKERS = {OPEN: T_CALL}
    STRAY_MARKERS = (CLOSE, TOOL_RESPONSE)
    RECOVER_MARKERS = {CLOSE: T_CLOSE, OPEN: T_CALL}

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        self.open_call().raw.append(OPEN)
        self._acc: list[str] = []
        self._state = self._header
        return end

    def _header(self, buf: str, pos: int) -> int:
        """``call:name`` up to the arguments' ``{`` (or ``<tool_call|>``: a call without arguments)."""
        hit = self.read_until(buf, pos, _HEADER, self._acc)
        if hit.tag is None:
            return hit.start
        header = "".join(self._acc).strip()
        m = _NAME.fullmatch(header)
        if hit.tag == T_CALL:
            self.call.raw.pop()  # that marker begins the next call
            self.invalid(f"a new call began before this one's arguments ({header[:40]!r})")
            return self._on_call_marker(hit.tag, buf, hit.start, hit.end)
        if m is None:
            error = f"expected 'call:NAME{{' after {OPEN}, got {header[:40]!r}"
            if hit.tag == T_ARGS:
                self.recover(error)
            else:
                self.invalid(error)
                self._state = self._text
            return hit.end
        self.name_call(m.group(1))
        if hit.tag == T_CLOSE:
            self.ready_then_text()
            return hit.end
        self._reader = GemmaArgs(self, DELIM)
        self._reader.open()
        self._state = self._arguments
        return hit.end

    def _arguments(self, buf: str, pos: int) -> int:
        reader = self._reader
        end = reader.scan(buf, pos)
        self.call.raw.append(buf[pos:end])
        if reader.error:
            self.recover(reader.error)
        elif reader.done:
            self.ready_then_text()
        return end
