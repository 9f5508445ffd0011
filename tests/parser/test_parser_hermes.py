"""hermes (+ think reasoning): cases under every chunking, and the streaming contract."""

from __future__ import annotations

import pytest

from schemas.events import ContentDelta, ToolCallArgs, ToolCallBegin, ToolCallInvalid, ToolCallReady
from workers.parser import collect, make_parser, parse_text
from parser_harness import Case, check_case

MARKERS = ("<tool_call>", "</tool_call>", "<think>", "</think>")


def tc(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


W = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
CASES = [
    Case("plain", "Hello, a < b and {1, 2} [x] <tool and </tool_", content="Hello, a < b and {1, 2} [x] <tool and </tool_"),
    Case("single", tc(W), calls=[("get_weather", {"city": "Paris"})], exact_args=['{"city": "Paris"}']),
    Case("narration", "Let me look.\n" + tc(W) + "\nDone.", content="Let me look.\n\nDone.",
         calls=[("get_weather", {"city": "Paris"})]),
    Case("parallel", tc(W) + "\n" + tc('{"name": "b", "arguments": {"x": [1, {"y": null}]}}') + tc(W),
         content="\n", calls=[("get_weather", {"city": "Paris"}), ("b", {"x": [1, {"y": None}]}),
                              ("get_weather", {"city": "Paris"})]),
    Case("fused", '<tool_call>{"name":"a","arguments":{}}</tool_call><tool_call>{"name":"b"}</tool_call>',
         calls=[("a", {}), ("b", {})], exact_args=["{}", "{}"]),
    Case("empty_args", tc('{"name": "now", "arguments": {}}'), calls=[("now", {})]),
    Case("no_args_key", tc('{"name": "now"}'), calls=[("now", {})], exact_args=["{}"]),
    Case("nested", tc('{"name": "n", "arguments": {"a": {"b": {"c": [[1], {"d": [true, false]}]}}}}'),
         calls=[("n", {"a": {"b": {"c": [[1], {"d": [True, False]}]}}})]),
    Case("unicode", tc('{"name": "s", "arguments": {"q": "5MW燃气轮机 😀 \\u00e9 \\"quoted\\" \\\\ back"}}'),
         calls=[("s", {"q": '5MW燃气轮机 😀 é "quoted" \\ back'})],
         exact_args=['{"q": "5MW燃气轮机 😀 \\u00e9 \\"quoted\\" \\\\ back"}']),
    Case("markers_in_strings", tc('{"name": "w", "arguments": {"t": "<tool_call> } ] { </tool_call> <think>", "u": "mkdir -p a/{b,c"}}'),
         calls=[("w", {"t": "<tool_call> } ] { </tool_call> <think>", "u": "mkdir -p a/{b,c"})]),
    Case("big_int", tc('{"name": "n", "arguments": {"v": 123456789012345678901234567890, "f": 1.5e300}}'),
         calls=[("n", {"v": 123456789012345678901234567890, "f": 1.5e300})],
         exact_args=['{"v": 123456789012345678901234567890, "f": 1.5e300}']),
    Case("name_last", tc('{"arguments": {"name": "inner"}, "name": "get_age"}'), calls=[("get_age", {"name": "inner"})]),
    Case("parameters_alias", tc('{"name": "p", "parameters": {"k": 1}}'), calls=[("p", {"k": 1})]),
    Case("string_args", tc('{"name": "s", "arguments": "{\\"k\\": 1}"}'), calls=[("s", {"k": 1})]),
    Case("extra_keys", tc('{"type": "function", "name": "e", "arguments": {"k": 1}, "id": 7}'), calls=[("e", {"k": 1})]),
    Case("trunc_args", "Hi " + '<tool_call>\n{"name": "a", "arguments": {"x": "abc', content="Hi ", invalid=[("a", True)]),
    Case("trunc_name", '<tool_call>\n{"name": "get_w', invalid=[("", True)]),
    Case("trunc_close", tc(W)[:-3], invalid=[("get_weather", True)]),
    Case("trunc_open", "text <tool_ca", content="text <tool_ca"),
    Case("invalid_json", tc('{"name": "a", "arguments": {invalid json}}') + " after", content=" after",
         invalid=[("a", False)]),
    Case("invalid_then_valid", tc('{"name": "a", "arguments": {"a": 1,}}') + tc(W),
         calls=[("get_weather", {"city": "Paris"})], invalid=[("a", False)]),
    Case("unclosed_then_next", '<tool_call>{"name": "a", "arguments": {"a": 1</tool_call>' + tc(W),
         calls=[("get_weather", {"city": "Paris"})], invalid=[("a", False)]),
    Case("missing_name", tc('{"arguments": {}}'), invalid=[("", False)]),
    Case("trailing_junk", tc('{"name": "a", "arguments": {}}}'), invalid=[("a", False)]),
    Case("non_object_args", tc('{"name": "a", "arguments": [1]}'), invalid=[("a", False)]),
    Case("nan_args", tc('{"name": "a", "arguments": {"x": NaN}}'), invalid=[("a", False)]),
    Case("stray_close", "a</tool_call>b", content="ab"),
    Case("think", "<think>\nLet me think: a < b.\n</think>\n\nOK." + tc(W), content="\n\nOK.",
         reasoning="\nLet me think: a < b.\n", calls=[("get_weather", {"city": "Paris"})], kw={"reasoning": "think"}),
    Case("think_interleaved", "<think>r0</think>" + tc(W) + "<think>r1</think>" + tc(W) + "</think>end",
         reasoning="r0r1", content="end", calls=[("get_weather", {"city": "Paris"})] * 2, kw={"reasoning": "think"}),
    Case("think_forced", "plan it</think>\n" + tc(W), reasoning="plan it", content="\n",
         calls=[("get_weather", {"city": "Paris"})], kw={"reasoning": "think_forced"}),
    Case("think_forced_unclosed_call", "plan it\n" + tc(W), reasoning="plan it\n",
         calls=[("get_weather", {"city": "Paris"})], kw={"reasoning": "think_forced"}),
    Case("think_truncated", "<think>never clos", reasoning="never clos", kw={"reasoning": "think"}),
    Case("think_off", "<think>x</think>y", content="<think>x</think>y"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hermes_case(case: Case) -> None:
    check_case("hermes", case, MARKERS)


def test_ready_is_emitted_at_close_not_at_finish() -> None:
    p = make_parser("hermes")
    events = p.feed('<tool_call>{"name": "f", "arguments": {"a": 1}}')
    assert not any(isinstance(e, ToolCallReady) for e in events)
    events = p.feed("\n</tool_call>")
    assert [type(e) for e in events] == [ToolCallReady]
    assert p.finish() == []


def test_events_stream_in_order() -> None:
    p = make_parser("hermes", call_id_prefix="call_s1_t2_")
    assert p.feed("Hi <tool_call>{") == [ContentDelta(text="Hi ")]
    assert p.feed('"name": "f", ') == [ToolCallBegin(index=0, id="call_s1_t2_0", name="f")]
    assert p.feed('"arguments": {"a": "x') == [ToolCallArgs(index=0, delta='{"a": "x')]
    assert p.feed('y"') == [ToolCallArgs(index=0, delta='y"')]
    assert p.feed("}}") == [ToolCallArgs(index=0, delta="}")]
    assert p.feed("</tool_call>") == [ToolCallReady(index=0, id="call_s1_t2_0", name="f", arguments='{"a": "xy"}')]


def test_ids_are_deterministic() -> None:
    text = tc(W) * 3
    a = parse_text("hermes", text, call_id_prefix="call_x_")
    b = parse_text("hermes", text, call_id_prefix="call_x_")
    assert [c.id for c in a.calls] == ["call_x_0", "call_x_1", "call_x_2"] == [c.id for c in b.calls]


def test_truncated_call_is_reported_with_raw() -> None:
    p = make_parser("hermes")
    events = p.feed('<tool_call>{"name": "f", "arguments": {"a": 1') + p.finish()
    last = events[-1]
    assert isinstance(last, ToolCallInvalid) and last.truncated and last.name == "f"
    assert last.raw == '{"name": "f", "arguments": {"a": 1'
    assert collect(events).calls == []


def test_invalid_json_names_the_reason() -> None:
    turn = parse_text("hermes", tc('{"name": "a", "arguments": {"x": 1,}}'))
    assert turn.invalid[0].error.startswith("invalid JSON")
    assert not turn.invalid[0].truncated


def test_feed_after_finish_is_an_error() -> None:
    p = make_parser("hermes")
    p.finish()
    with pytest.raises(RuntimeError):
        p.feed("x")
