"""The shared incremental core: the feed loop, text/reasoning separation and call bookkeeping.

A format subclasses ``StreamParser``.  Parsing is a state machine: ``self._state`` is a method
``(buf, pos) -> pos`` that consumes ``buf[pos:]`` as far as it can and may switch state.  A
state that returns ``pos`` unchanged without switching asks for more text; ``buf[pos:]`` is
then held until the next ``feed``.  States only ever hold a possible marker prefix, so each
character is looked at a bounded number of times (linear total work).

Text mode scans for the format's start markers plus, when reasoning is on, the format's think
span markers (``<think>``/``</think>`` unless ``runtime.reasoning_markers`` names the family's own);
reasoning mode scans for the span's close and the format's call starts (a call that
begins inside an unclosed think block still parses as a call).  Stray close markers are
dropped, so protocol markup never reaches content.  Reusable call states (expect a literal,
stream a JSON body, read a header, skip a malformed call) live in ``states.FormatParser``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from runtime.reasoning_markers import think_markers
from schemas.events import (
    ContentDelta,
    ParseBody,
    ReasoningDelta,
    ToolCallArgs,
    ToolCallBegin,
    ToolCallInvalid,
    ToolCallReady,
)
from workers.parser.scan import Markers, PatternFn, json_error
from workers.parser.schema import ToolSchemas

REASONING_MODES = (None, "think", "think_forced")
NAME_MAX = 256  # longest function name, parameter name or call header accepted

# Tags used by the text/reasoning scanners.
T_CALL = "call"          # a format's call start; handled by ``_on_call_marker``
T_THINK_OPEN = "think_open"
T_THINK_CLOSE = "think_close"
T_DROP = "drop"          # stray markup: swallowed
T_CLOSE = "close"        # the end of the current call (recovery scanning)

State = Callable[[str, int], int]


class CallStatus(enum.Enum):
    OPEN = "open"
    READY = "ready"
    INVALID = "invalid"


class Call:
    """One tool call being parsed: the only mutable per-call container."""

    __slots__ = ("index", "id", "name", "status", "args", "held", "raw")

    def __init__(self, index: int, call_id: str) -> None:
        self.index = index
        self.id = call_id
        self.name: str | None = None
        self.status = CallStatus.OPEN
        self.args: list[str] = []   # argument fragments emitted (or held until the name is known)
        self.held = True            # fragments are held until ToolCallBegin is out
        self.raw: list[str] = []    # the call's model text, for ToolCallInvalid.raw


class StreamParser:
    """Base of every format parser: ``feed(text) -> events`` and ``finish() -> events``."""

    FORMAT = ""
    # Literal call-start markers of the format -> tag (usually T_CALL).
    START_MARKERS: dict[str, str] = {}
    # Close markers that are dropped when they appear outside a call.
    STRAY_MARKERS: tuple[str, ...] = ()
    # Whether a call start inside a think block ends the reasoning.
    CALLS_EXIT_REASONING = True

    def __init__(self, tools: list[dict[str, Any]] | None = None, reasoning: str | None = None,
                 call_id_prefix: str = "call_") -> None:
        if reasoning not in REASONING_MODES:
            raise ValueError(f"reasoning must be one of {REASONING_MODES}, got {reasoning!r}")
        self.schemas = ToolSchemas(tools)
        self.reasoning = reasoning
        self.call_id_prefix = call_id_prefix
        self._buf = ""
        self._out: list[ParseBody] = []
        self._pend_kind: type | None = None
        self._pend: list[str] = []
        self._calls: list[Call] = []
        self._ids: set[str] = set()
        self.call: Call | None = None
        self._sent_upto = 0  # fragments of ``self.call`` already emitted
        self._think = think_markers(self.FORMAT)  # the reasoning span's (open, close)
        self._text_markers = self._build_text_markers()
        self._reason_markers = self._build_reason_markers()
        self._error = ""  # why the current call is being skipped (see states.FormatParser.recover)
        self._state: State = self._reasoning if reasoning == "think_forced" else self._text
        self.finished = False
        self.work = 0  # characters handed to states plus state steps: an operation counter for tests

    # ------------------------------------------------------------------ public API
    def feed(self, text: str) -> list[ParseBody]:
        """Consume a chunk of model text; return the events it completes (possibly none)."""
        if self.finished:
            raise RuntimeError("feed() after finish()")
        buf = self._buf + text if self._buf else text
        pos = 0
        n = len(buf)
        steps = 0
        while pos < n:
            state = self._state
            new = state(buf, pos)
            steps += 1
            if new == pos and self._state is state:
                break
            pos = new
        self.work += n + steps
        self._buf = buf[pos:] if pos < n else ""
        return self._drain()

    def finish(self) -> list[ParseBody]:
        """End of stream: release held text and report an unfinished call as truncated."""
        if not self.finished:
            self.finished = True
            held, self._buf = self._buf, ""
            self._at_eof(held)
        return self._drain()

    # ------------------------------------------------------------------ hooks for formats
    def _pattern_starts(self) -> dict[str, tuple[str, PatternFn]]:
        """Pattern call starts (first char -> (tag, matcher)); none by default."""
        return {}

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        """A start marker ``buf[start:end]`` was found in text: begin a call, return new pos."""
        raise NotImplementedError

    def _at_eof_in_call(self, held: str) -> None:
        """End of stream inside a call (default: the open call is truncated)."""
        if self.call is None:
            self.content(held)  # between calls: a partial marker that never completed
        else:
            self.call.raw.append(held)
            error = f"{self._error}; " if self._error else ""
            self.invalid(error + "stream ended inside the call", truncated=True)
        self._state = self._text

    # ------------------------------------------------------------------ text and reasoning
    def _build_text_markers(self) -> Markers:
        lits = dict(self.START_MARKERS)
        lits.update({m: T_DROP for m in self.STRAY_MARKERS})
        if self.reasoning:
            lits[self._think[0]] = T_THINK_OPEN
            lits[self._think[1]] = T_DROP
        return Markers(lits, self._pattern_starts())

    def _build_reason_markers(self) -> Markers:
        lits = {self._think[1]: T_THINK_CLOSE, self._think[0]: T_DROP}
        if self.CALLS_EXIT_REASONING:
            lits.update(self.START_MARKERS)
        return Markers(lits)

    def _text(self, buf: str, pos: int) -> int:
        """Plain content: emit text up to a marker (or a possible marker prefix)."""
        hit = self._text_markers.find(buf, pos)
        if hit.start > pos:
            self.content(buf[pos:hit.start])
        if hit.tag is None:
            return hit.start
        return self._text_marker(hit.tag, buf, hit.start, hit.end)

    def _text_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        if tag == T_THINK_OPEN:
            self._state = self._reasoning
            return end
        if tag == T_DROP:
            return end
        return self._on_call_marker(tag, buf, start, end)

    def _reasoning(self, buf: str, pos: int) -> int:
        """Reasoning text: emit up to ``</think>`` (or a call start, which ends reasoning)."""
        hit = self._reason_markers.find(buf, pos)
        if hit.start > pos:
            self.reason(buf[pos:hit.start])
        if hit.tag is None:
            return hit.start
        if hit.tag == T_THINK_CLOSE:
            self._state = self._text
            return hit.end
        if hit.tag == T_DROP:
            return hit.end
        self._state = self._text
        return self._on_call_marker(hit.tag, buf, hit.start, hit.end)

    def _at_eof(self, held: str) -> None:
        if self._state == self._text:
            self.content(held)
        elif self._state == self._reasoning:
            self.reason(held)
        else:
            self._at_eof_in_call(held)

    # ------------------------------------------------------------------ emission
    def content(self, text: str) -> None:
        """Queue content text (coalesced with adjacent content in this feed)."""
        if text:
            self._pending(ContentDelta, text)

    def reason(self, text: str) -> None:
        """Queue reasoning text."""
        if text:
            self._pending(ReasoningDelta, text)

    def _pending(self, kind: type, text: str) -> None:
        if self._pend_kind is not kind:
            self._flush_pending()
            self._pend_kind = kind
        self._pend.append(text)

    def _flush_pending(self) -> None:
        if self._pend:
            self._out.append(self._pend_kind(text="".join(self._pend)))
            self._pend = []
        self._pend_kind = None

    def _emit(self, event: ParseBody) -> None:
        self._flush_pending()
        self._out.append(event)

    def _drain(self) -> list[ParseBody]:
        self._flush_pending()
        self._flush_args()
        out, self._out = self._out, []
        return out

    # ------------------------------------------------------------------ calls
    def open_call(self) -> Call:
        """Start a new call (index allocated now; ToolCallBegin waits for the name)."""
        index = len(self._calls)
        call = Call(index, self.make_id(index))
        self._calls.append(call)
        self.call = call
        return call

    def make_id(self, index: int) -> str:
        """The call id for ``index``: a pure function of (prefix, index), so a replayed turn gets the same ids."""
        return f"{self.call_id_prefix}{index}"

    def name_call(self, name: str, native_id: str | None = None) -> None:
        """The current call's name is known: emit ToolCallBegin, then any held fragments."""
        call = self.call
        if native_id and native_id not in self._ids:
            call.id = native_id
        self._ids.add(call.id)
        call.name = name
        self._emit(ToolCallBegin(index=call.index, id=call.id, name=name))
        call.held = False
        self._sent_upto = 0
        self._flush_args()

    def args(self, text: str) -> None:
        """Append an argument fragment to the current call (coalesced per feed)."""
        if text:
            self.call.args.append(text)

    def _flush_args(self) -> None:
        call = self.call
        if call is None or call.held or call.status is not CallStatus.OPEN:
            return
        if len(call.args) > self._sent_upto:
            delta = "".join(call.args[self._sent_upto:])
            self._sent_upto = len(call.args)
            self._emit(ToolCallArgs(index=call.index, delta=delta))

    def ready(self) -> None:
        """The current call is complete: emit ToolCallReady, or ToolCallInvalid if its JSON is bad."""
        call = self.call
        if call.name is None:
            self.invalid("call has no function name")
            return
        if not call.args:
            self.args("{}")
        arguments = "".join(call.args)
        error = json_error(arguments)
        if error:
            self.invalid(error)
            return
        self._flush_args()
        call.status = CallStatus.READY
        self._emit(ToolCallReady(index=call.index, id=call.id, name=call.name, arguments=arguments))
        self.call = None

    def invalid(self, error: str, truncated: bool = False) -> None:
        """The current call is malformed or cut off: emit ToolCallInvalid with its raw text."""
        call = self.call
        if not call.held:
            self._flush_args()
        self._ids.add(call.id)
        call.status = CallStatus.INVALID
        self._emit(ToolCallInvalid(index=call.index, id=call.id, name=call.name or "",
                                   raw="".join(call.raw), error=error, truncated=truncated))
        self.call = None
