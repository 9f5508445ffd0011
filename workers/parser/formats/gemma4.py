"""gemma4: Google Gemma 4 ``<|tool_call>call:name{key:value,...}<tool_call|>``, read as vLLM 0.32's
``vllm/parser/gemma4.py`` and llama.cpp's Gemma 4 grammar read it, and as the checkpoint's template writes it.

    <|channel>thought\\n...<channel|>Text<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>
    ^ reasoning span (runtime.reasoning_markers)   ^ header to '{'  ^ bare key ^ string       ^ bare value

Arguments are JSON with three changes: keys are bare (``city``) or quoted as strings are; a string
is verbatim text between two ``<|"|>`` (no escapes: a string cannot hold ``<|"|>``, and markers
inside one are argument text); a bare value is a JSON number, ``true``, ``false`` or ``null``.
``GemmaArgs`` turns that into JSON as it arrives, so arguments stream; the call is ready at its
object's closing ``}`` (``<tool_call|>`` after it is dropped as stray markup, and a model that ends the
turn there instead, as vLLM notes some do, loses no call).  Anything else -- another bare word, a
missing ``:`` or ``,``, a bracket that does not match, markup before the object closed -- makes the
call invalid; it is skipped to ``<tool_call|>`` (or the next ``<|tool_call>``).  ``call:name<tool_call|>``
(no object) is a call without arguments; ``:name{`` (no ``call``) is read too, as vLLM reads it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable

from workers.parser.core import NAME_MAX, T_CALL, T_CLOSE
from workers.parser.scan import MAYBE_AT, NO_MATCH, Markers, match_literal, skip_ws
from workers.parser.schema import json_string
from workers.parser.states import FormatParser

OPEN, CLOSE = "<|tool_call>", "<tool_call|>"
TOOL_RESPONSE = "<|tool_response>"  # what the template writes after a turn's calls (dropped from text)
DELIM = '<|"|>'  # opens and closes a string
T_ARGS = "args"
_HEADER = Markers({"{": T_ARGS, CLOSE: T_CLOSE, OPEN: T_CALL})
_NAME = re.compile(r"(?:call)?:\s*(\S+)")
_KEY = re.compile(r"[^:{}\[\],<\n]*")  # a bare key: up to its ':' (spaces kept inside, trimmed)
_SCALAR = re.compile(r"[A-Za-z0-9.+\-]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = frozenset({"true", "false", "null"})
_CLOSER = {"{": "}", "[": "]"}


class Want(enum.Enum):
    """What ``GemmaArgs`` reads next (outside a string, key or bare value)."""

    KEY_OR_END = "a key or '}'"
    KEY = "a key"
    COLON = "':'"
    VALUE_OR_END = "a value or ']'"
    VALUE = "a value"
    SEP_OR_END = "',' or the closing bracket"


def _escaped(text: str) -> str:
    """``text`` as the inside of a JSON string."""
    return json_string(text)[1:-1]


def _held_delim(buf: str, end: int) -> int:
    """How many characters before ``end`` may begin ``DELIM`` (held until more text comes)."""
    at = buf.rfind("<", max(0, end - len(DELIM) + 1), end)
    return end - at if at >= 0 and DELIM.startswith(buf[at:end]) else 0


class GemmaArgs:
    """Gemma 4 arguments -> JSON fragments (``emit``), from just after the object's ``{``, in any chunking.

    Contract: ``scan(buf, pos)`` consumes ``buf[pos:]`` up to the end of the object and returns the
    index after the last consumed character, holding back only a possible ``<|"|>`` prefix; ``done`` is
    set when the object closes and ``error`` (a message, at the offending character, not consumed)
    when the text is not Gemma 4 arguments.  The fragments concatenate to the arguments' JSON.
    """

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self.stack = ["}"]  # the closer of each open container
        self.want = Want.KEY_OR_END
        self.step = self._token  # the sub-state: between tokens, or inside a string, key or bare value
        self.acc: list[str] = []  # a key's or bare value's text so far
        self.done = False
        self.error = ""

    def scan(self, buf: str, pos: int) -> int:
        n = len(buf)
        while pos < n and not self.done and not self.error:
            step = self.step
            new = step(buf, pos)
            if new == pos and self.step is step:
                break
            pos = new
        return pos

    # ------------------------------------------------------------------ between tokens
    def _token(self, buf: str, pos: int) -> int:
        pos = skip_ws(buf, pos)
        if pos >= len(buf):
            return pos
        c = buf[pos]
        if c == "<":
            return self._delim(buf, pos)
        if c in "{[":
            return self._open(c, pos)
        if c in "}]":
            return self._close(c, pos)
        if c == "," and self.want is Want.SEP_OR_END:
            self.emit(", ")
            self.want = Want.KEY if self.stack[-1] == "}" else Want.VALUE
            return pos + 1
        if c == ":" and self.want is Want.COLON:
            self.emit(": ")
            self.want = Want.VALUE
            return pos + 1
        if self.want in (Want.KEY, Want.KEY_OR_END) and _KEY.match(buf, pos).end() > pos:
            self.acc, self.step = [], self._bare_key
            return pos
        if self.want in (Want.VALUE, Want.VALUE_OR_END) and _SCALAR.match(buf, pos).end() > pos:
            self.acc, self.step = [], self._scalar
            return pos
        return self._fail(f"expected {self.want.value}, got {c!r}", pos)

    def _delim(self, buf: str, pos: int) -> int:
        end = match_literal(buf, pos, DELIM)
        if end == MAYBE_AT:
            return pos
        if end == NO_MATCH or self.want not in (Want.KEY, Want.KEY_OR_END, Want.VALUE, Want.VALUE_OR_END):
            what = "'<|\"|>'" if end != NO_MATCH else "markup ('<')"
            return self._fail(f"expected {self.want.value}, got {what}", pos)
        self.acc = []
        if self.want in (Want.KEY, Want.KEY_OR_END):
            self.step = self._quoted_key
        else:
            self.emit('"')
            self.step = self._string
        return end

    def _open(self, c: str, pos: int) -> int:
        if self.want not in (Want.VALUE, Want.VALUE_OR_END):
            return self._fail(f"expected {self.want.value}, got {c!r}", pos)
        self.emit(c)
        self.stack.append(_CLOSER[c])
        self.want = Want.KEY_OR_END if c == "{" else Want.VALUE_OR_END
        return pos + 1

    def _close(self, c: str, pos: int) -> int:
        empty = Want.KEY_OR_END if c == "}" else Want.VALUE_OR_END
        if self.stack[-1] != c:
            return self._fail(f"{c!r} where {self.stack[-1]!r} closes", pos)
        if self.want not in (Want.SEP_OR_END, empty):
            return self._fail(f"expected {self.want.value}, got {c!r}", pos)
        self.emit(c)
        self.stack.pop()
        self.done = not self.stack
        self.want = Want.SEP_OR_END
        return pos + 1

    def _fail(self, error: str, pos: int) -> int:
        self.error = error
        return pos

    # ------------------------------------------------------------------ strings, keys, bare values
    def _string(self, buf: str, pos: int) -> int:
        """A string value's text, streamed as JSON as it comes, up to its closing ``<|"|>``."""
        end = buf.find(DELIM, pos)
        stop = end if end >= 0 else len(buf) - _held_delim(buf, len(buf))
        self.emit(_escaped(buf[pos:stop]))
        if end < 0:
            return stop
        self.emit('"')
        self._after_value()
        return end + len(DELIM)

    def _quoted_key(self, buf: str, pos: int) -> int:
        end = buf.find(DELIM, pos)
        stop = end if end >= 0 else len(buf) - _held_delim(buf, len(buf))
        if not self._collect(buf[pos:stop], "key", pos):
            return pos
        if end < 0:
            return stop
        self._key_done()
        return end + len(DELIM)

    def _bare_key(self, buf: str, pos: int) -> int:
        end = _KEY.match(buf, pos).end()
        if not self._collect(buf[pos:end], "key", pos):
            return pos
        if end < len(buf):
            self._key_done(bare=True)
        return end

    def _scalar(self, buf: str, pos: int) -> int:
        end = _SCALAR.match(buf, pos).end()
        if not self._collect(buf[pos:end], "value", pos):
            return pos
        if end >= len(buf):
            return end
        word = "".join(self.acc)
        if word not in _LITERALS and not _NUMBER.fullmatch(word):
            return self._fail(f"bare value {word[:40]!r} is not a number, true, false or null", end)
        self.emit(word)
        self._after_value()
        return end

    def _collect(self, piece: str, what: str, pos: int) -> bool:
        self.acc.append(piece)
        if sum(map(len, self.acc)) > NAME_MAX:
            self._fail(f"{what} longer than {NAME_MAX} characters", pos)
            return False
        return True

    def _key_done(self, bare: bool = False) -> None:
        key = "".join(self.acc)
        self.emit(json_string(key.rstrip() if bare else key))
        self.want, self.step = Want.COLON, self._token

    def _after_value(self) -> None:
        self.want, self.step = Want.SEP_OR_END, self._token


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
        self.args("{")
        self._reader = GemmaArgs(self.args)
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
