"""Reusable call states on top of the core: the building blocks every format is made of.

    expect(literals, then)   whitespace, then each literal in order (a close marker, a fence)
    json_body(then)          one JSON value streamed as argument fragments by ``JsonScanner``
    read_until(...)          a header (name, id, key) up to a marker, length-limited
    recover(error)           skip a malformed call up to a close marker, then report it invalid
"""

from __future__ import annotations

from collections.abc import Callable

from workers.parser.core import NAME_MAX, T_CALL, State, StreamParser
from workers.parser.scan import MAYBE_AT, NO_MATCH, Hit, JsonScanner, Markers, match_literal, skip_ws


class FormatParser(StreamParser):
    """A ``StreamParser`` with the shared call states; every format subclasses this."""

    # Markers that end a malformed call while skipping it (tag T_CLOSE, or a start tag).
    RECOVER_MARKERS: dict[str, str] = {}

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._recover_markers = Markers(self.RECOVER_MARKERS) if self.RECOVER_MARKERS else None

    def _after_recovery(self, tag: str) -> State:
        """State after a malformed call was skipped up to a ``tag`` marker (default: text)."""
        return self._text

    # ------------------------------------------------------------------ malformed calls
    def recover(self, error: str) -> None:
        """The current call is malformed: skip its text up to a close marker, then report it.

        Formats without close markers report the call at once and go on with text from here.
        """
        if self._recover_markers is None:
            self.invalid(error)
            self._state = self._text
            return
        self._error = error
        self._state = self._skipping

    def _skipping(self, buf: str, pos: int) -> int:
        hit = self._recover_markers.find(buf, pos)
        self.call.raw.append(buf[pos:hit.start])
        if hit.tag is None:
            return hit.start
        error, self._error = self._error, ""
        if hit.tag == T_CALL:
            self.invalid(error + " (a new call began before this one was closed)")
            self._state = self._after_recovery(hit.tag)
            return self._on_call_marker(hit.tag, buf, hit.start, hit.end)
        self.invalid(error)
        self._state = self._after_recovery(hit.tag)
        return hit.end

    # ------------------------------------------------------------------ shared call states
    def expect(self, literals: tuple[str, ...], then: Callable[[], None]) -> None:
        """Next, after optional whitespace: each of ``literals`` in order; then call ``then``."""
        self._expect_seq = literals
        self._expect_i = 0
        self._expect_then = then
        self._state = self._expecting

    def _expecting(self, buf: str, pos: int) -> int:
        ws_end = skip_ws(buf, pos)
        self.call.raw.append(buf[pos:ws_end])
        if ws_end >= len(buf):
            return ws_end
        literal = self._expect_seq[self._expect_i]
        end = match_literal(buf, ws_end, literal)
        if end == MAYBE_AT:
            return ws_end
        if end == NO_MATCH:
            self.recover(f"expected {literal!r}, got {buf[ws_end]!r}")
            return ws_end
        self.call.raw.append(literal)
        self._expect_i += 1
        if self._expect_i == len(self._expect_seq):
            self._expect_then()
        return end

    def json_body(self, then: Callable[[], None]) -> None:
        """Next: the call's arguments as one JSON value, streamed as fragments; then call ``then``."""
        self._body = JsonScanner()
        self._body_then = then
        self._state = self._json_body

    def _json_body(self, buf: str, pos: int) -> int:
        body = self._body
        if not body.started:
            start = skip_ws(buf, pos)
            self.call.raw.append(buf[pos:start])
            if start >= len(buf):
                return start
            pos = start
        end = body.scan(buf, pos)
        self.args(buf[pos:end])
        self.call.raw.append(buf[pos:end])
        if body.error:
            self.recover(body.error)
        elif body.done:
            self._body_then()
        return end

    def envelope_step(self, buf: str, pos: int) -> tuple[int, bool]:
        """Feed the call object ``self._env`` reads; (new pos, whether it closed).  A malformed one is recovered."""
        env = self._env
        end = env.scan(buf, pos)
        self.call.raw.append(buf[pos:end])
        if env.error:
            self.recover(env.error)
            return end, False
        return end, env.done

    def read_until(self, buf: str, pos: int, markers: Markers, acc: list[str], limit: int = NAME_MAX) -> Hit:
        """Append text up to the next marker to ``acc`` and the call's raw text.

        Returns the Hit (its marker consumed into raw), or a Hit with tag None when more text
        is needed -- also when ``acc`` grew past ``limit``: the call is then being recovered.
        """
        hit = markers.find(buf, pos)
        piece = buf[pos:hit.start]
        acc.append(piece)
        self.call.raw.append(piece)
        if sum(map(len, acc)) > limit:
            self.recover(f"header longer than {limit} characters")
            return Hit(hit.start, hit.start, None)
        if hit.tag is not None:
            self.call.raw.append(buf[hit.start:hit.end])
        return hit

    def ready_then_text(self) -> None:
        """Finish the current call and go back to text."""
        self.ready()
        self._state = self._text
