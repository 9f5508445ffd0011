"""``ContentRun``: content up to the first marker, a marker's beginning held until it is told apart
(its agreement with every format's parser: ``tests/parser/test_parser_content_run.py``)."""

from __future__ import annotations

from workers.decode.content_run import ContentRun

MARKS = ("<tool_call>", "</tool_call>")


def test_a_marker_split_across_deltas_is_held_then_handed_over_with_the_rest() -> None:
    run = ContentRun(MARKS)
    first, second = run.feed("Let me check.\n<tool"), run.feed('_call>\n{"name"')
    assert first == ("Let me check.\n", None) and second == ("", '<tool_call>\n{"name"')
    assert run.rest == '<tool_call>\n{"name"' and run.feed(": 1}") == ("", ": 1}")  # after it: all the parser's
    assert first[0] + second[0] == "Let me check.\n"


def test_what_only_looked_like_a_marker_is_content() -> None:
    run = ContentRun(MARKS)
    out = [run.feed("a < b, <")]
    assert out[-1] == ("a < b, ", None)
    out.append(run.feed("/tool"))
    assert out[-1] == ("", None) and run.held == "</tool"
    out.append(run.feed("s>"))
    assert out[-1] == ("</tools>", None)  # not a marker after all
    out.append(run.feed("ends on <tool_c"))
    assert out[-1] == ("ends on ", None)
    held = run.finish()
    assert held == "<tool_c" and run.rest is None  # the turn ended: what was held is content
    assert "".join(c for c, _ in out) + held == "a < b, </tools>ends on <tool_c"


def test_a_marker_at_the_start_leaves_no_content() -> None:
    run = ContentRun(MARKS)
    assert run.feed("<tool_call>{}") == ("", "<tool_call>{}") and run.held == ""  # no content, nothing held


def test_literal_openers_and_optional_characters() -> None:
    from workers.decode.constraints.formats import _literals

    assert _literals("<tool_call>|<function=") == ("<tool_call>", "<function=")
    assert _literals(r"<\|tool_call\|>") == ("<|tool_call|>",)
    assert _literals("calls?_begin") == ("calls_begin", "call_begin")
    assert _literals(r"\[\s*x") is None and _literals("a+") is None and _literals("?a") is None
    assert _literals("(x)") is None and _literals("a|") is None and _literals(r"a\sb") is None
