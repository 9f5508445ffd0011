"""Every format, every case category, every chunking (whole, 1 char, 1 token, random splits)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from test_parser_properties import RENDER, XML, _tools, _wrap_prose
from parser_harness import parse_all_ways
from runtime.reasoning_markers import think_markers
from workers.parser import FORMATS, collect, make_parser

W = ("get_weather", {"city": "Paris", "unit": "celsius"})
CATEGORIES: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "single": [W],
    "parallel": [W, ("get_time", {"tz": "UTC"}), ("search", {"q": "x", "n": 3})],
    "empty_args": [("now", {})],
    "nested": [("nest", {"a": {"b": [1, {"c": None, "d": [True, False]}]}, "e": [[]], "f": -1.5})],
    "unicode_escapes": [("say", {"q": '漢字 😀 é "quoted" \\ back\nline\ttab \u0001', "big": 123456789012345678901234567890})],
    "markers_in_strings": [("w", {"t": "<tool_call></tool_call>[TOOL_CALLS]<|call|><｜tool▁call▁end｜><think>",
                                  "u": "mkdir -p a/{b,c} [1, 2] f(x=1)"})],
}


def _render_calls(fmt: str, calls: list[tuple[str, dict]], narration: bool) -> tuple[str, str]:
    parts, content = [], []
    for i, (name, args) in enumerate(calls):
        prose = f"Step {i}: let me check. " if narration else ""
        parts += [_wrap_prose(fmt, prose), RENDER[fmt](i if fmt != "llama3_json" or narration else i, name, args)]
        content.append(prose)
    tail = " All done." if narration else ""
    return "".join(parts) + _wrap_prose(fmt, tail), "".join(content) + tail


def _kw(fmt: str, calls: list[tuple[str, dict]]) -> dict[str, Any]:
    return {"tools": _tools(calls)} if fmt in XML else {}


@pytest.mark.parametrize("narration", [False, True], ids=["bare", "narrated"])
@pytest.mark.parametrize("category", list(CATEGORIES))
@pytest.mark.parametrize("fmt", FORMATS)
def test_category(fmt: str, category: str, narration: bool) -> None:
    calls = CATEGORIES[category]
    if fmt == "llama3_json" and narration and len(calls) > 1:
        calls = calls[:1]
    text, content = _render_calls(fmt, calls, narration)
    turn = parse_all_ways(fmt, text, **_kw(fmt, calls))
    assert [(c.name, json.loads(c.arguments)) for c in turn.calls] == calls
    assert turn.content == content
    assert not turn.invalid
    assert len({c.id for c in turn.calls}) == len(calls)


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncated_inside_arguments(fmt: str) -> None:
    calls = [W, ("write", {"path": "a.txt", "text": "TRUNC_HERE and more"})]
    text, _ = _render_calls(fmt, calls, narration=True)
    cut = text.index("TRUNC_HERE") + 5
    turn = parse_all_ways(fmt, text[:cut], **_kw(fmt, calls))
    assert [c.name for c in turn.calls] == ["get_weather"]
    assert [(c.name, c.truncated) for c in turn.invalid] == [("write", True)]
    assert turn.invalid[0].raw


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncated_everywhere_never_ready(fmt: str) -> None:
    """Cut anywhere inside the call: never ready; a begun call is reported as truncated."""
    text = RENDER[fmt](0, "f", {"a": [1, "two"]})
    end = {"deepseek_v3": "<｜tool▁call▁end｜>", "deepseek_v31": "<｜tool▁call▁end｜>", "kimi_k2": "<|tool_call_end|>",
           "qwen3_coder": "</function>", "minimax_m2": "</invoke>", "seed_oss": "</function>",
           "deepseek_v32": "</｜DSML｜invoke>", "deepseek_v4": "</｜DSML｜invoke>", "step3": "<｜tool_call_end｜>",
           "deepseek_v41": "</｜DSML｜ invoke>", "mimo": "</function>",
           "minimax_m3": "]<]minimax[>[</invoke>", "kimi_k3": "<|close|>call<|sep|>"}.get(fmt)
    last = text.index(end) + len(end) - 1 if end else len(text) - 1
    ready_at = {"jamba": "}]", "cohere_command": "}]", "granite": "}]", "phi4_mini_json": "}]", "apertus": "}]", "olmo3": ")<", "xlam": "}]", "gemma4": "}<", "lfm2": ")]",
                "hunyuan_a13b": "}\n]", "minimax_m1": "}\n<"}.get(fmt)  # a listed call is ready at its own close
    if ready_at:
        last = text.index(ready_at)
    if fmt in ("llama3_json", "mistral", "pythonic"):
        last = len(text) - 1 - (fmt in ("mistral", "pythonic"))  # the object/call closes one char before the list
    for cut in range(1, last + 1):
        turn = parse_all_ways(fmt, text[:cut], **_kw(fmt, [("f", {"a": [1, "two"]})]))
        assert not turn.calls, (cut, text[:cut])
        assert all(c.truncated for c in turn.invalid)


@pytest.mark.parametrize("reasoning", ["think", "think_forced"])
@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "harmony"])
def test_reasoning_then_call(fmt: str, reasoning: str) -> None:
    call = RENDER[fmt](0, *W)
    think_open, think_close = think_markers(fmt)
    head = think_open if reasoning == "think" else ""
    text = f"{head}I should call get_weather (a < b).{think_close}\n\nSure. {call}"
    turn = parse_all_ways(fmt, text, reasoning=reasoning, **_kw(fmt, [W]))
    assert turn.reasoning == "I should call get_weather (a < b)."
    assert turn.content == "\n\nSure. "
    assert [(c.name, json.loads(c.arguments)) for c in turn.calls] == [W]


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f not in ("harmony", "llama3_json", "pythonic", "xlam")])
def test_call_inside_unclosed_think_is_not_swallowed(fmt: str) -> None:
    text = think_markers(fmt)[0] + "plan: call it" + RENDER[fmt](0, *W)
    turn = parse_all_ways(fmt, text, reasoning="think", **_kw(fmt, [W]))
    assert turn.reasoning == "plan: call it"
    assert [c.name for c in turn.calls] == ["get_weather"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_plain_prose_is_content(fmt: str) -> None:
    text = "Compare a < b, {1, 2} and [1, 2]; see [link](x) or f(x). <b>bold</b> | <|x|> [x]"
    turn = parse_all_ways(fmt, text)
    assert (turn.content, turn.calls, turn.invalid) == (text, [], [])


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "harmony"])
def test_a_turn_offered_no_tools_is_all_content(fmt: str) -> None:
    """``calls=False`` (a request without tools): call markup is content, never a call."""
    text = 'Sure.<tool_call>\n{"name": "search", "arguments": {"q": "sea"}}\n</tool_call>[f(x=1)]'
    for reasoning in (None, "think"):
        p = make_parser(fmt, reasoning=reasoning, calls=False)
        turn = collect(p.feed(text) + p.finish())
        assert (turn.content, turn.calls, turn.invalid) == (text, [], [])
    p = make_parser(fmt, reasoning="think", calls=False)
    turn = collect(p.feed("<think>hm</think>" + text) + p.finish())
    assert (turn.reasoning, turn.content) == ("hm", text)
