"""A turn's plain content, told apart from its markup as the decoder streams it.

A turn that may call a tool opens with content far more often than with a call (narration first, a
final answer with no call at all).  Until its text holds one of its format's markers
(``constraints.formats.call_marks``: what opens a call, what closes one), that text is content to
its parser, verbatim, so the decoder publishes it itself, as it does a text-only turn's
(``workers.decode.turn``); from the first marker on, the rest of the turn goes to a parser, which
starts on the marker with the content before it in hand.

    feed("Let me check.\\n<tool") -> ("Let me check.\\n", None)   "<tool" held: it may open a marker
    feed("_call>\\n{...")         -> ("", "<tool_call>\\n{...")   a marker: the rest is the parser's

Any chunking of the same text splits it at the same place (a marker split across deltas is held
until it is told apart); the content returned, joined, is the text before the first marker.
"""

from __future__ import annotations


class ContentRun:
    """The plain content at a turn's start (see the module doc); ``rest`` is set once a marker came."""

    __slots__ = ("firsts", "held", "longest", "marks", "rest")

    def __init__(self, marks: tuple[str, ...]) -> None:
        assert marks and all(marks), "a content run needs markers to end it"
        self.marks = marks
        self.firsts = tuple(dict.fromkeys(m[0] for m in marks))  # a marker's beginning starts with one of these
        self.longest = max(map(len, marks)) - 1  # the longest proper beginning of a marker
        self.held = ""  # the text's end that may begin a marker
        self.rest: str | None = None  # from the first marker on (None: none yet)

    def feed(self, text: str) -> tuple[str, str | None]:
        """(content now known, the text from the first marker on or None); after a marker, only the
        rest is returned (the caller hands it to a parser)."""
        if self.rest is not None:
            return "", text
        seen = self.held + text if self.held else text
        if not any(c in seen for c in self.firsts):  # the common case: nothing here can begin a marker
            self.held = ""
            return seen, None
        at = -1
        for mark in self.marks:
            i = seen.find(mark)
            if i >= 0 and (at < 0 or i < at):
                at = i
        if at >= 0:
            self.held, self.rest = "", seen[at:]
            return seen[:at], self.rest
        keep = self._open_prefix(seen)
        self.held = seen[len(seen) - keep:] if keep else ""
        return seen[:len(seen) - keep], None

    def finish(self) -> str:
        """What was held at the turn's end: content (no marker completed)."""
        held, self.held = self.held, ""
        return held

    def _open_prefix(self, text: str) -> int:
        """The length of the longest end of ``text`` that is a proper beginning of a marker."""
        tail = text[-self.longest:]
        if not any(c in tail for c in self.firsts):
            return 0
        best = 0
        for mark in self.marks:
            for n in range(min(len(mark) - 1, len(text)), best, -1):
                if text.endswith(mark[:n]):
                    best = n
                    break
        return best
