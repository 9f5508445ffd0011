"""The decoder's content run (``workers.decode.content_run``) against the parser it stands in for.

A decoder publishes a turn's text as content until one of its format's markers arrives
(``call_marks``), then hands the rest to a parser that starts on the marker.  For every format with
markers, every case of the parser's own suites must come out the same that way as parsed whole:
the same content (the decoder's part joined with the parser's), calls and invalid calls -- under
every chunking of the decoder's deltas."""

from __future__ import annotations

import pytest

from parser_harness import Case, chunkings, feed_chunks
from test_parser_family_cases import CASES as FAMILY_CASES
from test_parser_format_cases import CASES as FORMAT_CASES
from test_parser_formats import CATEGORIES, _kw, _render_calls
from test_parser_hermes import CASES as HERMES_CASES
from workers.decode.constraints.formats import FORMATS, call_marks
from workers.decode.content_run import ContentRun
from workers.parser import parse_text

PROSE = [
    "Plain prose, no markup at all.",
    "Angles < and > and a tag-like <b>bold</b> and [brackets] and {braces}: all content.",
    "Ends on half a marker <tool",
    "A stray close </tool_call> in prose.",
    "",
]


def _cases() -> list[tuple[str, str, dict]]:
    out = []
    for fmt in FORMATS:
        if not call_marks(fmt):
            continue
        cases: list[Case] = [*FORMAT_CASES.get(fmt, []), *FAMILY_CASES.get(fmt, []),
                             *(HERMES_CASES if fmt == "hermes" else [])]
        for calls in CATEGORIES.values():  # every format's renderings of every call category
            for narration in (False, True):
                cases.append(Case("category", _render_calls(fmt, calls, narration)[0], kw=_kw(fmt, calls)))
        for case in cases:
            if case.kw.get("reasoning"):
                continue  # a content run is for turns with no reasoning parser (``TurnRun``)
            out.append((fmt, case.text, case.kw))
            out.append((fmt, "Let me look that up. " + case.text, case.kw))
        out += [(fmt, text, {}) for text in PROSE]
    return out


CASES = _cases()


def test_the_formats_with_markers() -> None:
    """Those whose calls open with a literal marker; llama3_json's and pythonic's open with text
    that prose may hold, kimi_k3 wraps content in markup, harmony is all channels, and gigachat3's
    and minimax_m3's parsers drop markup of their own from content (``MORE_MARKUP``: this test
    found them)."""
    marked = [f for f in FORMATS if call_marks(f)]
    assert {"hermes", "qwen3_coder", "glm45", "mistral", "minimax_m2", "seed_oss", "gemma4"} <= set(marked)
    assert sorted(set(FORMATS) - set(marked)) == [  # every format without, so that the docs can name them
        "gigachat3", "harmony", "kimi_k3", "lfm2", "llama3_json", "minimax_m3", "olmo3", "pythonic", "xlam"]
    assert "<｜tool▁call▁begin｜>" in call_marks("deepseek_v3")  # an optional character: both spellings


@pytest.mark.parametrize(("fmt", "text", "kw"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_content_run_then_a_parser_reads_a_turn_as_the_parser_alone(fmt: str, text: str, kw: dict) -> None:
    whole = parse_text(fmt, text, **kw)
    for name, chunks in chunkings(text).items():
        run = ContentRun(call_marks(fmt))
        rest: list[str] = []
        published: list[str] = []  # what the decoder would publish as content
        for chunk in chunks:
            content, after = run.feed(chunk)
            published.append(content)
            if after is not None:
                rest.append(after)
        if run.rest is None:
            published.append(run.finish())
        before = "".join(published)
        if run.rest is None:  # no marker: the whole text is content, as its parser reads it
            assert before == text and whole.content == text and not whole.calls and not whole.invalid, name
            continue
        parsed = feed_chunks(fmt, rest, **kw)
        assert before + parsed.content == whole.content, f"{fmt} {name}"
        assert [(c.name, c.arguments) for c in parsed.calls] == [(c.name, c.arguments) for c in whole.calls], name
        assert [(c.name, c.truncated, c.raw) for c in parsed.invalid] == [
            (c.name, c.truncated, c.raw) for c in whole.invalid], name
