"""Format-specific cases (many from public parser test suites), each under every chunking."""

from __future__ import annotations

import pytest

from parser_harness import Case, check_case
from schemas.events import ToolCallArgs
from workers.parser import collect, make_parser, parse_text

TOOLS = [{"type": "function", "function": {"name": "w", "parameters": {"type": "object", "properties": {
    "zip": {"type": "string"}, "n": {"type": "integer"}, "f": {"type": "number"}, "b": {"type": "boolean"},
    "o": {"type": "object"}, "l": {"type": "array"}, "opt": {"type": ["integer", "null"]},
    "e": {"type": "string", "enum": ["a", "b"]}}}}}]
T = {"tools": TOOLS}

CASES: dict[str, list[Case]] = {
    "llama3_json": [
        Case("inline", 'Here is the result: {"name": "getOpenIncidentsTool", "parameters": {}} Would you like to know more?',
             content="Here is the result:  Would you like to know more?", calls=[("getOpenIncidentsTool", {})]),
        Case("semicolons", '{"name": "s", "parameters": {"query": "test1"}} ; {"name": "g", "parameters": {}};'
             '{"name": "s", "arguments": {"query": "test {value} [complex]", "nested": {"inner": "more {brackets}"}}}',
             calls=[("s", {"query": "test1"}), ("g", {}), ("s", {"query": "test {value} [complex]", "nested": {"inner": "more {brackets}"}})]),
        Case("python_tag", '<|python_tag|>{"name": "f", "parameters": {"a": 1}}', calls=[("f", {"a": 1})]),
        Case("invalid", '{"name": "invalidTool", "parameters": {invalid json}', content="invalid json}",
             invalid=[("invalidTool", False)]),
        Case("prose_json", 'Use {"a": 1} or { "b": 2 } or {x}.', content='Use {"a": 1} or { "b": 2 } or {x}.'),
        Case("truncated", 'ok {"name": "f", "parameters": {"a": "b', content="ok ", invalid=[("f", True)]),
        Case("type_key_ignored", '{"name": "f", "type": "function", "parameters": {"k": [1]}}', calls=[("f", {"k": [1]})]),
    ],
    "mistral": [
        Case("array", '[TOOL_CALLS][{"name": "add", "arguments":{"a": 3.5, "b": 4}}]', calls=[("add", {"a": 3.5, "b": 4})],
             exact_args=['{"a": 3.5, "b": 4}']),
        Case("args_first", '[TOOL_CALLS] [{"arguments":{"city": "San Francisco", "state": "CA"}, "name": "get_current_weather"}]',
             calls=[("get_current_weather", {"city": "San Francisco", "state": "CA"})]),
        Case("inner_name", '[TOOL_CALLS] [{"arguments":{"name": "John Doe"}, "name": "get_age"}]', calls=[("get_age", {"name": "John Doe"})]),
        Case("spacing", '[TOOL_CALLS]  [ {"name":"add" , "arguments" : {"a": 3, "b": "4"} } , {"name": "z"} ] done',
             content=" done", calls=[("add", {"a": 3, "b": "4"}), ("z", {})]),
        Case("v11", 'Sure.[TOOL_CALLS]get_current_weather{"city": "San Francisco", "unit": "celsius"}[TOOL_CALLS]now{}',
             content="Sure.", calls=[("get_current_weather", {"city": "San Francisco", "unit": "celsius"}), ("now", {})]),
        Case("v13_args", "[TOOL_CALLS]f[ARGS]{\"x\": [1, 2]}[TOOL_CALLS]g[CALL_ID]a1b2c3d4e[ARGS]{}", calls=[("f", {"x": [1, 2]}), ("g", {})]),
        Case("invalid", '[TOOL_CALLS][{"name": "f", "arguments": {"a": 1,}}]', invalid=[("f", False)]),
        Case("truncated", '[TOOL_CALLS]f{"a": "', invalid=[("f", True)]),
        Case("prose_brackets", "See [1, 2] and [TOOL] [x]", content="See [1, 2] and [TOOL] [x]"),
    ],
    "pythonic": [
        Case("types", "[register_user(name='John Doe', age=37, address={'city': 'San Francisco', 'state': 'CA'}, role=None, "
             "passed_test=True, aliases=['John', 'Johnny'], big=123456789012345678901234567890, f=1.50, t=(1, 2))]",
             calls=[("register_user", {"name": "John Doe", "age": 37, "address": {"city": "San Francisco", "state": "CA"},
                                       "role": None, "passed_test": True, "aliases": ["John", "Johnny"],
                                       "big": 123456789012345678901234567890, "f": 1.5, "t": [1, 2]})]),
        Case("empty", "[get_weather()]", calls=[("get_weather", {})], exact_args=["{}"]),
        Case("empty_containers", "[do_something_cool(additional_data={}), do_something_cool(steps=[])]",
             calls=[("do_something_cool", {"additional_data": {}}), ("do_something_cool", {"steps": []})]),
        Case("escapes", """[get_weather(city='Martha\\'s Vineyard', metric='\\"cool units\\"', s="a), ]b")]""",
             calls=[("get_weather", {"city": "Martha's Vineyard", "metric": '"cool units"', "s": "a), ]b"})]),
        Case("llama4", "<|python_start|>[get_weather(city='LA', metric='C')]<|python_end|>", calls=[("get_weather", {"city": "LA", "metric": "C"})]),
        Case("compact", "[get_weather(city='LA',metric='C'),register_user(name='Doe',age=9)]",
             calls=[("get_weather", {"city": "LA", "metric": "C"}), ("register_user", {"name": "Doe", "age": 9})]),
        Case("prose", "How can I help you today?", content="How can I help you today?"),
        Case("not_literal", "[f(a=foo), g(b=1)] after", content=" after", calls=[("g", {"b": 1})], invalid=[("f", False)]),
        Case("positional", "[f(1)]", invalid=[("f", False)]),
        Case("truncated", "Let me. [f(a='x", content="Let me. ", invalid=[("f", True)]),
    ],
    "deepseek_v31": [
        Case("basic", 'normal text<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>foo<｜tool▁sep｜>{"x":1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
             content="normal text", calls=[("foo", {"x": 1})], exact_args=['{"x":1}']),
        Case("invalid", '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>foo<｜tool▁sep｜>{"x":}<｜tool▁call▁end｜>'
             '<｜tool▁call▁begin｜>bar<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
             calls=[("bar", {})], invalid=[("foo", False)]),
        Case("no_section", 'x<｜tool▁call▁begin｜>foo<｜tool▁sep｜>{"a": "<｜tool▁call▁end｜>"}<｜tool▁call▁end｜>y',
             content="xy", calls=[("foo", {"a": "<｜tool▁call▁end｜>"})]),
        Case("no_args", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>foo<｜tool▁call▁end｜><｜tool▁calls▁end｜>", invalid=[("", False)]),
    ],
    "deepseek_v3": [
        Case("two", '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_w\n```json\n{"x": 1}\n```<｜tool▁call▁end｜>\n'
             '<｜tool▁call▁begin｜>function<｜tool▁sep｜>b\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
             calls=[("get_w", {"x": 1}), ("b", {})], exact_args=['{"x": 1}', "{}"]),
        Case("no_fence", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n{\"a\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
             calls=[("f", {"a": 2})]),
        Case("bad_fence", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```python\nx\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
             invalid=[("f", False)]),
    ],
    "kimi_k2": [
        Case("basic", "I'll help you check the weather. <|tool_calls_section_begin|> <|tool_call_begin|>\nfunctions.get_weather:0 "
             '<|tool_call_argument_begin|> {"city": "Beijing"} <|tool_call_end|> <|tool_calls_section_end|>',
             content="I'll help you check the weather. ", calls=[("get_weather", {"city": "Beijing"})]),
        Case("bad_id", "<|tool_calls_section_begin|><|tool_call_begin|>functions.invalid_get_weather.0<|tool_call_argument_begin|>"
             '{"city": "x"}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{}'
             "<|tool_call_end|><|tool_calls_section_end|>", calls=[("get_weather", {})], invalid=[("", False)]),
        Case("singular", "<|tool_call_section_begin|><|tool_call_begin|>functions.a:3<|tool_call_argument_begin|>{}<|tool_call_end|>"
             "<|tool_call_section_end|>", calls=[("a", {})]),
        Case("truncated", "<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{\"x\": 1}",
             invalid=[("a", True)]),
    ],
    "qwen3_coder": [
        Case("weather", "Let me check.\n<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n"
             "<parameter=state>\nTX\n</parameter>\n</function>\n</tool_call>", content="Let me check.\n",
             calls=[("get_current_weather", {"city": "Dallas", "state": "TX"})]),
        Case("typed", "<tool_call>\n<function=w>\n<parameter=zip>\n02139\n</parameter>\n<parameter=n>\n123456789012345678901234567890\n"
             "</parameter>\n<parameter=f>\n3.14\n</parameter>\n<parameter=b>\nTrue\n</parameter>\n<parameter=o>\n{\"key\": \"value\"}\n"
             "</parameter>\n<parameter=l>\n['a', 1]\n</parameter>\n<parameter=opt>\nnull\n</parameter>\n<parameter=unknown>\n42\n"
             "</parameter>\n<parameter=text>\nhello world\n</parameter>\n</function>\n</tool_call>",
             calls=[("w", {"zip": "02139", "n": 123456789012345678901234567890, "f": 3.14, "b": True, "o": {"key": "value"},
                           "l": ["a", 1], "opt": None, "unknown": 42, "text": "hello world"})],
             exact_args=['{"zip": "02139", "n": 123456789012345678901234567890, "f": 3.14, "b": true, "o": {"key": "value"}, '
                         '"l": ["a", 1], "opt": null, "unknown": 42, "text": "hello world"}'], kw=T),
        Case("bad_number", "<tool_call>\n<function=w>\n<parameter=n>\nmany\n</parameter>\n</function>\n</tool_call>",
             calls=[("w", {"n": "many"})], kw=T),
        Case("code_value", "<tool_call>\n<function=w>\n<parameter=zip>\n\ndef f():\n    return a < b\n\n</parameter>\n</function>\n</tool_call>",
             calls=[("w", {"zip": "\ndef f():\n    return a < b\n"})], kw=T),
        Case("bare_function", "x <function=f>\n<parameter=a>\n1\n</parameter>\n</function> y", content="x  y", calls=[("f", {"a": 1})]),
        Case("junk", "<tool_call>\n<function=f>\njunk\n</function>\n</tool_call>ok<tool_call>\n<function=g>\n</function>\n</tool_call>",
             content="ok", calls=[("g", {})], invalid=[("f", False)]),
        Case("truncated", "<tool_call>\n<function=w>\n<parameter=zip>\n021", invalid=[("w", True)], kw=T),
    ],
    "minimax_m2": [
        Case("two", 'Sure.\n<minimax:tool_call>\n<invoke name="w">\n<parameter name="zip">02139</parameter>\n<parameter name="n">5</parameter>\n'
             '</invoke>\n<invoke name="x">\n</invoke>\n</minimax:tool_call> bye', content="Sure.\n bye",
             calls=[("w", {"zip": "02139", "n": 5}), ("x", {})], kw=T),
        Case("truncated", '<minimax:tool_call>\n<invoke name="w">\n<parameter name="zip">1', invalid=[("w", True)], kw=T),
    ],
    "glm45": [
        Case("newlines", 'hi<tool_call>w\n<arg_key>zip</arg_key>\n<arg_value>02139</arg_value>\n<arg_key>n</arg_key>\n'
             '<arg_value>7</arg_value>\n<arg_key>e</arg_key>\n<arg_value>a</arg_value>\n</tool_call>', content="hi",
             calls=[("w", {"zip": "02139", "n": 7, "e": "a"})], kw=T),
        Case("glm47_compact", "<tool_call>w<arg_key>zip</arg_key><arg_value>1</arg_value><arg_key>o</arg_key>"
             '<arg_value>{"a": [1]}</arg_value></tool_call>', calls=[("w", {"zip": "1", "o": {"a": [1]}})], kw=T),
        Case("no_args", "<tool_call>get_current_time\n</tool_call>", calls=[("get_current_time", {})]),
        Case("incomplete", "<tool_call>get_current_time\n<arg_key>a", invalid=[("get_current_time", True)]),
        Case("think_kept_when_off", "<think>x</think><tool_call>f\n</tool_call>", content="<think>x</think>", calls=[("f", {})]),
        # GLM-4.7 (and Ling 3, its call format): no newline anywhere, a call without arguments, and the forced
        # think span (the prompt ends in <think>) ended by the call itself
        Case("glm47_no_args", "<tool_call>get_current_time</tool_call><tool_call>w<arg_key>n</arg_key><arg_value>2"
             "</arg_value></tool_call>", calls=[("get_current_time", {}), ("w", {"n": 2})], kw=T),
        Case("glm47_call_ends_forced_think", "plan it<tool_call>w<arg_key>zip</arg_key><arg_value>\n02139 </arg_value>"
             "</tool_call>", reasoning="plan it", calls=[("w", {"zip": "\n02139 "})], kw={**T, "reasoning": "think_forced"}),
        Case("ling3_newlines", "</think>\n<tool_call>w\n<arg_key>n</arg_key>\n<arg_value>5</arg_value>\n</tool_call>",
             content="\n", calls=[("w", {"n": 5})], kw={**T, "reasoning": "think_forced"}),
        Case("glm47_empty_name", "<tool_call><arg_key>a</arg_key><arg_value>1</arg_value></tool_call>ok", content="ok",
             invalid=[("", False)]),
    ],
    "harmony": [
        Case("call", '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location": "San Francisco"}<|call|>',
             calls=[("get_weather", {"location": "San Francisco"})], exact_args=['{"location": "San Francisco"}']),
        Case("full_turn", "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>analysis to=functions.grep code"
             '<|message|>{"q": "x"}<|call|><|start|>assistant to=functions.y<|channel|>commentary json<|message|>{}<|call|>'
             "<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>", content="It is sunny.",
             reasoning="Need weather.", calls=[("grep", {"q": "x"}), ("y", {})]),
        Case("preamble", "<|channel|>commentary<|message|>Checking now.<|end|>", content="Checking now."),
        Case("invalid", "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{bad}<|call|>"
             "<|start|>assistant<|channel|>final<|message|>ok<|return|>", content="ok", invalid=[("f", False)]),
        Case("truncated", '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": [1', invalid=[("f", True)]),
        Case("plain", "no harmony here", content="no harmony here"),
    ],
}
ALL = [(fmt, c) for fmt, cases in CASES.items() for c in cases]


@pytest.mark.parametrize(("fmt", "case"), ALL, ids=[f"{f}-{c.id}" for f, c in ALL])
def test_format_case(fmt: str, case: Case) -> None:
    check_case(fmt, case)


def test_kimi_keeps_native_ids() -> None:
    text = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{}<|tool_call_end|>"
            "<|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>")
    turn = parse_text("kimi_k2", text, call_id_prefix="call_t3_")
    assert [c.id for c in turn.calls] == ["functions.a:0", "call_t3_1"]  # a repeated native id falls back


def test_mistral_call_ids() -> None:
    turn = parse_text("mistral", "[TOOL_CALLS]g[CALL_ID]a1b2c3d4e[ARGS]{}[TOOL_CALLS]h{}", call_id_prefix="call_s_")
    assert turn.calls[0].id == "a1b2c3d4e"
    generated = turn.calls[1].id
    assert len(generated) == 9 and generated.isalnum()
    assert parse_text("mistral", "[TOOL_CALLS]g[CALL_ID]a1b2c3d4e[ARGS]{}[TOOL_CALLS]h{}", call_id_prefix="call_s_") == turn


def test_qwen3_coder_streams_string_values() -> None:
    p = make_parser("qwen3_coder", tools=TOOLS)
    events = p.feed("<tool_call>\n<function=w>\n<parameter=zip>\nline one\n")
    events += p.feed("line two")
    frags = "".join(e.delta for e in events if isinstance(e, ToolCallArgs))
    assert frags == '{"zip": "line one\\nline two'
    events += p.feed("\n</parameter>\n</function>\n</tool_call>") + p.finish()
    assert collect(events).calls[0].arguments == '{"zip": "line one\\nline two"}'
